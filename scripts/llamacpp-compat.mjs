// Loads loom-written GGUF files in the real llama.cpp (the prebuilt libllama/libggml that the npm
// package @node-llama-cpp/linux-x64 ships; nothing is compiled) through node-llama-cpp's API, and
// compares it with loom: tokenization against `loom-gguf tokenize --ids`, greedy generation
// against `loom-run --temp 0 --json` (with and without a --grammar), perplexity on a text
// (llama-perplexity's protocol: chunks of PPL_CTX tokens, BOS first, the second half of each
// chunk scored) against `loom-run --perplexity` within 0.1%. Normally run by
// scripts/llamacpp-compat.sh, which installs node-llama-cpp first.
//
// usage: node scripts/llamacpp-compat.mjs [--loom-bin DIR] [--inp FILE] MODEL.gguf ...
//   LOOM_BIN           loom binaries (default build/bin, relative to the repo root)
//   LOOM_LLAMACPP_DIR  folder whose node_modules holds node-llama-cpp
//                      (default ${XDG_CACHE_HOME:-$HOME/.cache}/loom/llamacpp-compat)
//   --ppl-text FILE    the perplexity text (default: the repo's README.md and docs/*.md)
//   --lora FILE, --lora-scaled FILE SCALE
//                      LoRA adapters applied to every model, in llama.cpp (the context's
//                      adapters) and in loom-run (the same flags)
//   --inp FILE         extra test strings in llama.cpp's tests/*.inp format (default: the
//                      repo's ../shared/data/vocab/ggml-vocab-gpt-2.gguf.inp when it exists)
// Prints a JSON report on stdout and a summary on stderr. Exit 0 when every model passes: loads
// with check_tensors, no warning/error log line (but llama.cpp's "unused tensor" notes on the
// multi-token-prediction layers it skips and its note on mistral3's YaRN factor), every tokenization identical, perplexity within
// 0.1%, and, for float weights (general.file_type F32/F16/BF16), every greedy generation identical;
// 1 when one does not; 2 on a usage or setup error. Greedy tokens of quantized files are reported
// but not required: llama.cpp rounds activations to 8 bits for quantized dot products where loom
// keeps them in float for some types, and the near-flat logits of the random test models flip on
// such differences (perplexity, which weighs every token, is the check there).
import { spawnSync } from "node:child_process";
import { createRequire } from "node:module";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const N_GEN = 16;
const PPL_CTX = 128, PPL_CHUNKS = 4, PPL_TOLERANCE = 1e-3;
const PROMPTS = ["The quick brown fox", "Once upon a time, there was a little girl named Lily.", "Hello world"];
// Each prompt is also generated under this grammar (loom-run --grammar against llama.cpp's grammar
// sampler): literals, classes with non-ASCII ranges, repetitions and optional parts.
const GRAMMAR = String.raw`root ::= "{" ws "\"name\":" ws str ws "," ws "\"n\":" ws num ws "}"
str ::= "\"" ([a-zA-Z ] | [à-ÿ]){1,12} "\""
num ::= "-"? [0-9]{1,6}
ws ::= [ ]?`;
const BUILTIN_STRINGS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "Once upon a time, there was a little girl named Lily.",
    "It was the best of times, it was the worst of times.",
    "A fool and his money are soon parted.",
    "Mixed CASE wOrDs, ALLCAPS and HTTPServer.getHTTPResponseCode()",
    "0 1 2 3 4 5 6 7 8 9 10 100 1000 10000 123456789",
    "1234567890 3.14159 -42 +7 1e-5 0x1F 2026-11-30 12:34:56",
    "$19.99 (50% off!) #1 @home ~/path/to/file.txt",
    "a,b;c:d!e?f (g) [h] {i} \"j\" 'k' <l> |m| \\n /o/ *p* _q_ ^r^ `s`",
    "... --- !!! ??? *** === +++ ,,, ;;;",
    "email: someone@example.com, url: https://example.org/a?b=c&d=e#f",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
    "don't won't can't I'm you're we've they'll she'd it's",
    "DON'T Won't I'M 'quoted' rock 'n' roll",
    "text with <|endoftext|> inside",
    "   leading spaces",
    "trailing spaces   ",
    "a  b   c    d     e",
    "      ",
    "tabs\tand\t\tmore\t\t\ttabs",
    "line one\nline two\n\nline four\r\nCRLF",
    "\n\n\n\n",
    "x",
    "café naïve résumé jalapeño",
    "Grüße aus Köln – „Anführungszeichen“",
    "Привет, мир!",
    "日本語のテキスト",
    "emoji 🙂👍🏽 and ✓ ✗ → ← ∞ ≠ ≈",
];

function die(msg) {
    process.stderr.write(`llamacpp-compat: ${msg}\n`);
    process.exit(2);
}

// ---- arguments
let loomBin = process.env.LOOM_BIN || "build/bin";
let inpPath = path.join(repoRoot, "..", "shared", "data", "vocab", "ggml-vocab-gpt-2.gguf.inp");
let inpExplicit = false;
let pplText = null;
const models = [];
const adapters = [];  // --lora / --lora-scaled
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--loom-bin" && i + 1 < argv.length) loomBin = argv[++i];
    else if (a === "--inp" && i + 1 < argv.length) { inpPath = argv[++i]; inpExplicit = true; }
    else if (a === "--ppl-text" && i + 1 < argv.length) pplText = path.resolve(argv[++i]);
    else if (a === "--lora" && i + 1 < argv.length) adapters.push({ filePath: path.resolve(argv[++i]), scale: 1 });
    else if (a === "--lora-scaled" && i + 2 < argv.length) {
        const filePath = path.resolve(argv[++i]), scale = Number(argv[++i]);
        if (!Number.isFinite(scale)) die(`--lora-scaled ${filePath}: the scale must be a number`);
        adapters.push({ filePath, scale });
    }
    else if (a === "-h" || a === "--help") {
        process.stdout.write("usage: node scripts/llamacpp-compat.mjs [--loom-bin DIR] [--inp FILE] MODEL.gguf ...\n");
        process.exit(0);
    } else if (a.startsWith("-")) die(`unknown option ${a} (see --help)`);
    else models.push(a);
}
if (models.length === 0) die("no model given (usage: node scripts/llamacpp-compat.mjs [--loom-bin DIR] MODEL.gguf ...)");
loomBin = path.resolve(repoRoot, loomBin);
for (const tool of ["loom-gguf", "loom-run"])
    if (!fs.existsSync(path.join(loomBin, tool))) die(`no ${path.join(loomBin, tool)}: build first (scripts/build.sh) or set LOOM_BIN`);
for (const m of models) if (!fs.existsSync(m)) die(`no such model file: ${m}`);
for (const a of adapters) if (!fs.existsSync(a.filePath)) die(`no such adapter file: ${a.filePath}`);
// The adapters in llama.cpp's context options and as loom-run's flags.
const loraContext = adapters.length ? { lora: { adapters: adapters.map((a) => ({ ...a })) } } : {};
const loraFlags = adapters.flatMap((a) => ["--lora-scaled", a.filePath, String(a.scale)]);

// ---- test strings: the built-in list, then llama.cpp's .inp strings (deduplicated)
let inpStrings = [];
if (fs.existsSync(inpPath)) {
    const parts = fs.readFileSync(inpPath, "utf8").split("\n__ggml_vocab_test__\n");
    if (parts.length > 1 && parts[parts.length - 1] === "") parts.pop(); // after the last separator
    inpStrings = parts;
} else if (inpExplicit) die(`no such file: ${inpPath}`);
else inpPath = null;
const testStrings = [...new Set([...BUILTIN_STRINGS, ...inpStrings])];

// ---- node-llama-cpp from LOOM_LLAMACPP_DIR (its own package resolves the prebuilt binaries)
const nlcDir = process.env.LOOM_LLAMACPP_DIR ||
    path.join(process.env.XDG_CACHE_HOME || path.join(os.homedir(), ".cache"), "loom", "llamacpp-compat");
let nlc, nlcVersion;
try {
    const req = createRequire(path.join(path.resolve(nlcDir), "package.json"));
    nlc = await import(pathToFileURL(req.resolve("node-llama-cpp")).href);
    const pkgDir = path.dirname(req.resolve("node-llama-cpp")).replace(/[\\/]dist$/, "");
    nlcVersion = JSON.parse(fs.readFileSync(path.join(pkgDir, "package.json"), "utf8")).version;
} catch (e) {
    die(`node-llama-cpp not found under ${nlcDir} (scripts/llamacpp-compat.sh installs it): ${String(e?.message || e).split("\n")[0]}`);
}
const { getLlama, LlamaLogLevel } = nlc;

const logs = [];
let llama;
try {
    llama = await getLlama({
        gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true, progressLogs: false,
        maxThreads: 1, logLevel: LlamaLogLevel.debug,
        logger: (level, msg) => { for (const line of String(msg).split("\n")) if (line.trim()) logs.push({ level, line: line.trimEnd() }); },
    });
} catch (e) {
    die(`could not start the prebuilt llama.cpp: ${String(e?.message || e).split("\n")[0]}`);
}

function run(tool, args, timeout) {
    const r = spawnSync(path.join(loomBin, tool), args, { encoding: "utf8", timeout, maxBuffer: 64 << 20 });
    if (r.error) return { error: String(r.error.message) };
    if (r.status !== 0) return { error: `${tool} exit ${r.status ?? r.signal}: ${(r.stderr || "").trim().split("\n").pop()}` };
    return { stdout: r.stdout };
}

// The perplexity text as one file (loom-run reads it with -f).
function pplTextFile() {
    if (pplText) return pplText;
    const docs = path.join(repoRoot, "docs");
    const files = [path.join(repoRoot, "README.md"),
                   ...fs.readdirSync(docs).filter((f) => f.endsWith(".md")).sort().map((f) => path.join(docs, f))];
    // written once per run and removed when the script exits, however it exits
    const out = path.join(os.tmpdir(), `loom-ppl-text-${process.pid}.txt`);
    fs.writeFileSync(out, files.map((f) => fs.readFileSync(f, "utf8")).join("\n"));
    process.on("exit", () => fs.rmSync(out, { force: true }));
    pplText = out;
    return out;
}

// llama-perplexity's protocol on llama.cpp: the text tokenized with BOS when the model asks for
// it, chunks of nCtx tokens whose first token is BOS, the tokens of the second half scored.
async function llamaPerplexity(model, text, nCtx, nChunks) {
    const bos = model.tokens.shouldPrependBosToken ? model.tokens.bos : null;
    const tokens = [...(bos !== null ? [bos] : []), ...model.tokenize(text, false)];
    const chunks = Math.min(nChunks, Math.floor(tokens.length / nCtx));
    const ctx = await model.createContext({ contextSize: nCtx, batchSize: nCtx, threads: 1, sequences: 1, ...loraContext });
    const first = Math.floor(nCtx / 2);
    let nll = 0, count = 0;
    const seq = ctx.getSequence();
    for (let c = 0; c < chunks; c++) {
        await seq.clearHistory();
        const chunk = tokens.slice(c * nCtx, (c + 1) * nCtx);
        if (bos !== null) chunk[0] = bos;
        const input = chunk.map((t, j) => (j >= first && j < nCtx - 1 ? [t, { generateNext: { logits: true } }] : t));
        const out = await seq.controlledEvaluate(input);
        for (let j = first; j < nCtx - 1; j++) {  // the logits at position j predict token j + 1
            const logits = out[j]?.next?.logits;  // raw: the log-softmax is taken here, in double
            if (!logits) throw new Error(`llama.cpp returned no logits at position ${j}`);
            let max = -Infinity;
            for (const v of logits.values()) max = Math.max(max, v);
            let sum = 0;
            for (const v of logits.values()) sum += Math.exp(v - max);
            nll += max + Math.log(sum) - logits.get(chunk[j + 1]);
            count++;
        }
    }
    seq.dispose();
    await ctx.dispose();
    return { ppl: Math.exp(nll / count), chunks, scored: count };
}

async function checkModel(arg) {
    const modelPath = path.resolve(arg);
    const res = { model: arg, bytes: fs.statSync(modelPath).size, ok: false };
    logs.length = 0;
    let model;
    try {
        model = await llama.loadModel({ modelPath, gpuLayers: 0, checkTensors: true, useMmap: true });
        res.load = "OK";
    } catch (e) {
        res.load = "FAILED: " + String(e?.message || e);
    }
    if (model) {
        res.vocabularyType = model.vocabularyType;
        res.specialTokens = { bos: model.tokens.bos, eos: model.tokens.eos, eot: model.tokens.eot,
                              shouldPrependBos: model.tokens.shouldPrependBosToken };
        res.trainContextSize = model.trainContextSize;
        res.embeddingVectorSize = model.embeddingVectorSize;

        // tokenization: llama.cpp without special tokens vs loom-gguf tokenize (no special tokens)
        const tk = { strings: testStrings.length, identical: 0, different: 0, loom_errors: 0, mismatches: [] };
        for (const s of testStrings) {
            const ours = model.tokenize(s, false).join(" ");
            // --prompt=TEXT keeps a leading '-' a value; an empty --prompt= would take the next argument
            const r = run("loom-gguf", ["tokenize", "-m", modelPath, ...(s === "" ? ["-p", ""] : ["--prompt=" + s]), "--ids"], 60000);
            if (r.error) { tk.loom_errors++; tk.mismatches.push({ text: s, llamacpp: ours, loom_error: r.error }); continue; }
            const loom = r.stdout.trim().split(/\s+/).filter(Boolean).join(" ");
            if (loom === ours) tk.identical++;
            else { tk.different++; tk.mismatches.push({ text: s, llamacpp: ours, loom }); }
        }
        res.tokenize = tk;

        // greedy generation: the prompt as loom-run tokenizes it (BOS when the file asks for it,
        // special tokens parsed), N_GEN tokens or until an end-of-generation token, as loom-run stops
        const contextSize = Math.min(512, model.trainContextSize || 512);
        const ctx = await model.createContext({ contextSize, batchSize: contextSize, threads: 1, sequences: 1, ...loraContext });
        res.generation = [];
        const grammar = new nlc.LlamaGrammar(llama, { grammar: GRAMMAR });
        for (const [prompt, withGrammar] of PROMPTS.flatMap((p) => [[p, false], [p, true]])) {
            const seq = ctx.getSequence();
            const ptoks = [...(model.tokens.shouldPrependBosToken ? [model.tokens.bos] : []), ...model.tokenize(prompt, true)];
            const got = [];
            const grammarEvaluationState = withGrammar ? new nlc.LlamaGrammarEvaluationState({ model, grammar }) : undefined;
            for await (const t of seq.evaluate(ptoks, { temperature: 0, grammarEvaluationState })) {
                if (model.isEogToken(t) || got.length >= N_GEN) break;
                got.push(t);
                if (got.length >= N_GEN || ptoks.length + got.length >= contextSize) break;
            }
            seq.dispose();
            const g = { prompt, grammar: withGrammar, llamacpp: { prompt_tokens: ptoks, gen_tokens: got, text: model.detokenize(got) } };
            const r = run("loom-run", ["-m", modelPath, "--prompt=" + prompt, "-n", String(N_GEN), "--temp", "0", "-t", "1",
                                      "--n-gpu-layers", "0", "--json", ...loraFlags, ...(withGrammar ? ["--grammar", GRAMMAR] : [])], 300000);
            if (r.error) g.loom = { error: r.error };
            else {
                try {
                    const j = JSON.parse(r.stdout);
                    g.loom = { prompt_tokens: j.tokens.slice(0, j.n_prompt), gen_tokens: j.tokens.slice(j.n_prompt), text: j.text };
                } catch (e) { g.loom = { error: "loom-run --json output: " + String(e?.message || e) }; }
            }
            g.prompt_identical = !g.loom.error && g.loom.prompt_tokens.join(" ") === ptoks.join(" ");
            g.identical = g.prompt_identical && g.loom.gen_tokens.join(" ") === got.join(" ");
            res.generation.push(g);
        }
        await ctx.dispose();

        // perplexity: llama.cpp (above) against loom-run --perplexity on the same text and protocol
        const textFile = pplTextFile();
        const lp = await llamaPerplexity(model, fs.readFileSync(textFile, "utf8"), PPL_CTX, PPL_CHUNKS);
        const r = run("loom-run", ["-m", modelPath, "--perplexity", "-f", textFile, "-c", String(PPL_CTX), "-b",
                                  String(PPL_CTX), "--chunks", String(PPL_CHUNKS), "-t", "1", "--n-gpu-layers", "0",
                                  "--json", ...loraFlags], 600000);
        res.perplexity = { text: textFile, n_ctx: PPL_CTX, chunks: lp.chunks, llamacpp: lp.ppl };
        if (r.error) res.perplexity.loom_error = r.error;
        else {
            try { res.perplexity.loom = JSON.parse(r.stdout).ppl; } catch (e) { res.perplexity.loom_error = String(e); }
        }
        res.perplexity.rel_diff = res.perplexity.loom === undefined ? null : Math.abs(res.perplexity.loom / lp.ppl - 1);
        res.perplexity.ok = res.perplexity.rel_diff !== null && res.perplexity.rel_diff < PPL_TOLERANCE;
        await model.dispose();
    }
    // every log line llama.cpp (and node-llama-cpp) wrote while loading, tokenizing and generating
    // except llama.cpp's note on each tensor of the multi-token-prediction layers it skips (glm4moe's
    // nextn_predict_layers, the last blocks: every GLM-4.5 download logs them)
    const info = run("loom-gguf", ["info", modelPath], 60000);
    const key = (k) => Number((new RegExp(`\\.${k}\\s+\\S+\\s+=\\s+(\\d+)`).exec(info.stdout || "") || [])[1] ?? 0);
    const firstSkipped = key("nextn_predict_layers") > 0 ? key("block_count") - key("nextn_predict_layers") : Infinity;
    const skippedNote = (l) => {
        const m = /^model has unused tensor blk\.(\d+)\./.exec(l.line);
        return l.level === "warn" && m !== null && Number(m[1]) >= firstSkipped;
    };
    // and its note on the YaRN attention factor it derives from rope.scaling.yarn_log_multiplier
    // (mistral3: every Ministral 3 download logs it)
    const hasLogMul = /\.rope\.scaling\.yarn_log_multiplier\s/.test(info.stdout || "");
    const yarnNote = (l) => l.level === "warn" && hasLogMul && /^llama_context: setting new yarn_attn_factor = /.test(l.line);
    const bad = logs.filter((l) => ["fatal", "error", "warn"].includes(l.level) && !skippedNote(l) && !yarnNote(l));
    res.log = { lines: logs.length, warnings_errors: bad.length, warning_error_lines: bad.map((l) => `[${l.level}] ${l.line}`),
                skipped_layer_notes: logs.filter(skippedNote).length };
    const ftype = Number((/general\.file_type\s+\S+\s+=\s+(\d+)/.exec(info.stdout || "") || [])[1] ?? -1);
    res.float_weights = ftype === 0 || ftype === 1 || ftype === 32;  // llama_ftype ALL_F32, MOSTLY_F16, MOSTLY_BF16
    res.ok = res.load === "OK" && bad.length === 0 && res.tokenize.identical === res.tokenize.strings &&
             res.perplexity.ok && (!res.float_weights || res.generation.every((g) => g.identical));
    return res;
}

const report = {
    tool: "scripts/llamacpp-compat.mjs",
    date: new Date().toISOString(),
    llamaCpp: { ...llama.llamaCppRelease, binaries: llama.buildType, nodeLlamaCpp: nlcVersion, gpu: llama.gpu, threads: 1 },
    testStrings: { builtin: BUILTIN_STRINGS.length, inp: inpPath, inpStrings: inpStrings.length, total: testStrings.length },
    models: [],
};
const err = (s) => process.stderr.write(s + "\n");
err(`llama.cpp ${report.llamaCpp.release} (${report.llamaCpp.repo}, ${report.llamaCpp.binaries} binaries from ` +
    `node-llama-cpp ${nlcVersion}, CPU, 1 thread); ${testStrings.length} test strings`);
for (const m of models) {
    const r = await checkModel(m);
    report.models.push(r);
    if (r.load !== "OK") {
        err(`${m}: FAIL: load ${r.load}`);
    } else {
        const gOk = r.generation.filter((g) => g.identical).length;
        err(`${m}: ${r.ok ? "PASS" : "FAIL"}: load OK (check_tensors), ${r.log.warnings_errors} warning/error log lines, ` +
            `tokenization ${r.tokenize.identical}/${r.tokenize.strings} identical, ` +
            `greedy ${N_GEN}-token generation ${gOk}/${r.generation.length} identical (half under a grammar)` +
            `${r.float_weights ? "" : " (quantized: reported only)"}, ` +
            `perplexity llama.cpp ${r.perplexity.llamacpp.toFixed(4)} loom ${r.perplexity.loom?.toFixed(4) ?? r.perplexity.loom_error} ` +
            `(${r.perplexity.rel_diff === null ? "-" : (100 * r.perplexity.rel_diff).toFixed(4) + "%"})`);
        for (const x of r.tokenize.mismatches.slice(0, 5))
            err(`  tokenize ${JSON.stringify(x.text)}: llama.cpp [${x.llamacpp}] loom [${x.loom ?? x.loom_error}]`);
        for (const g of r.generation.filter((g) => !g.identical))
            err(`  generate ${JSON.stringify(g.prompt)}${g.grammar ? " (grammar)" : ""}: llama.cpp [${g.llamacpp.prompt_tokens} | ${g.llamacpp.gen_tokens}] ` +
                `loom ${g.loom.error ?? `[${g.loom.prompt_tokens} | ${g.loom.gen_tokens}]`}`);
    }
    for (const l of r.log.warning_error_lines.slice(0, 8)) err(`  ${l}`);
}
report.ok = report.models.every((r) => r.ok);
process.stdout.write(JSON.stringify(report, null, 1) + "\n");
await llama.dispose();
process.exit(report.ok ? 0 : 1);
