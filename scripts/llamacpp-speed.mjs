// Times llama.cpp itself on one GGUF file: the prebuilt libllama/libggml of node-llama-cpp
// (installed by scripts/llamacpp-compat.sh; its CPU backend picks the variant built for this CPU).
// Prompt: --pp tokens evaluated as one batch; decode: --tg tokens generated greedily after one
// token, each token timed on its own; --depth tokens in the context first (not timed), as
// llama-bench's -d. Prints one JSON object: {pp_ts: [...], tg_ts: [...], cpu_variant}.
// usage: node scripts/llamacpp-speed.mjs MODEL.gguf [--threads 2] [--pp 128] [--tg 32] [--reps 2] [--mmap 0|1]
//                                       [--depth 0] [--fa 0|1]
import { createRequire } from "module";
import os from "os";
import path from "path";
import { pathToFileURL } from "url";

const args = process.argv.slice(2);
const die = (msg) => { console.error(`llamacpp-speed: ${msg}`); process.exit(2); };
if (args.length < 1 || args[0].startsWith("-"))
    die("usage: llamacpp-speed.mjs MODEL.gguf [--threads N] [--pp N] [--tg N] [--reps N] [--mmap 0|1] [--depth N] [--fa 0|1]");
const opt = { threads: 2, pp: 128, tg: 32, reps: 2, mmap: 1, depth: 0, fa: 1 };
for (let i = 1; i < args.length; i += 2) {
    const k = args[i].replace(/^--/, ""), v = Number(args[i + 1]);
    if (!(k in opt) || !Number.isInteger(v) || v < 0) die(`bad option ${args[i]} ${args[i + 1] ?? ""}`);
    opt[k] = v;
}
const dir = process.env.LOOM_LLAMACPP_DIR ||
    path.join(process.env.XDG_CACHE_HOME || path.join(os.homedir(), ".cache"), "loom", "llamacpp-compat");
let nlc;
try {
    nlc = await import(pathToFileURL(createRequire(path.join(path.resolve(dir), "package.json")).resolve("node-llama-cpp")).href);
} catch (e) {
    die(`node-llama-cpp not found under ${dir} (scripts/llamacpp-compat.sh installs it)`);
}
const logs = [];
const llama = await nlc.getLlama({
    gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true, progressLogs: false,
    maxThreads: opt.threads, logLevel: nlc.LlamaLogLevel.debug, logger: (level, msg) => logs.push(String(msg)),
});
const model = await llama.loadModel({ modelPath: args[0], gpuLayers: 0, useMmap: opt.mmap !== 0 });
const nCtx = Math.max(256, opt.depth + opt.pp + opt.tg + 8);
const ctx = await model.createContext({ contextSize: nCtx, batchSize: Math.min(512, Math.max(opt.pp, opt.depth, 1)),
                                        threads: opt.threads, sequences: 1, flashAttention: opt.fa !== 0 });
const seq = ctx.getSequence();
const vocab = model.fileInfo?.metadata?.tokenizer?.ggml?.tokens?.length || 1000;
const out = { pp_ts: [], tg_ts: [], cpu_variant: (logs.find((l) => /loaded CPU backend/.test(l)) || "").split("/").pop() };
const tokens = (n, from) => Array.from({ length: n }, (_, i) => ((from + i) * 7919 + 13) % vocab);
async function fill() {  // a fresh context holding --depth tokens
    await seq.clearHistory();
    if (opt.depth > 0) await seq.evaluateWithoutGeneratingNewTokens(tokens(opt.depth, 1000));
}
for (let r = 0; r < opt.reps; r++) {
    if (opt.pp > 0) {  // llama-bench's pp test: a prompt of arbitrary tokens in one batch
        await fill();
        const t0 = performance.now();
        await seq.evaluateWithoutGeneratingNewTokens(tokens(opt.pp, 0));
        out.pp_ts.push(opt.pp / ((performance.now() - t0) / 1000));
    }
    if (opt.tg > 0) {  // one token, then tg tokens generated one by one; the first (it follows the prompt) is not counted
        await fill();
        const times = [];
        let last = performance.now(), n = 0;
        for await (const t of seq.evaluate([(model.tokens.bos ?? 1)], { temperature: 0 })) {
            const now = performance.now();
            times.push(now - last);
            last = now;
            if (++n > opt.tg) break;
        }
        out.tg_ts.push(...times.slice(1).map((ms) => 1000 / ms));
    }
}
console.log(JSON.stringify(out));
process.exit(0);
