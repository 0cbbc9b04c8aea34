#!/usr/bin/env python3
"""loom against llama.cpp on the same GGUF files, in the same minute (docs/PERFORMANCE.md, "loom
and llama.cpp").

For each type's model in --models (the largest `*-TYPE.gguf` there: scripts/decode-bandwidth.py
writes them), each round runs loom-bench's decode with its read probe, then llama.cpp's decode
(scripts/llamacpp-speed.mjs: the prebuilt libllama of node-llama-cpp, installed by
scripts/llamacpp-compat.sh), then loom's again, then both prompts (--pp tokens in one batch).
llama.cpp's decode is set against the mean read bandwidth of the two loom runs around it; its
weight bytes per token are loom's (the same file). Prints a markdown table of the medians.

With --depth N every test starts from a context already holding N tokens (loom-bench -d, as
llama-bench's; llama.cpp with flash attention, as llama-bench picks on the CPU).

usage: scripts/speed-vs-llamacpp.py [--bin build/bin] [--models DIR] [--types Q4_0,Q4_K,...]
                                    [--rounds 2] [--threads 2] [--pp 128] [--tg 32] [--depth 0]
"""
import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import time

TYPES = "F16,Q8_0,Q4_0,Q4_1,Q5_0,Q5_1,Q2_K,Q3_K,Q4_K,Q5_K,Q6_K,IQ4_NL,IQ4_XS,MXFP4"
HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:  # the tool's own last line says why (llamacpp-speed.mjs: node-llama-cpp missing, ...)
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"speed-vs-llamacpp: {os.path.basename(cmd[0 if cmd[0] != 'node' else 1])} failed "
                         f"(exit {r.returncode}): {last}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--models", default="/tmp/loom-speed-models")
    ap.add_argument("--types", default=TYPES)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", default="2")
    ap.add_argument("--pp", default="128")
    ap.add_argument("--tg", default="32")
    ap.add_argument("--depth", default="0")
    a = ap.parse_args()
    B, T = a.bin, a.threads

    def largest(t):  # the model with the most layers of this type
        found = [(int(m.group(1)), p) for p in glob.glob(os.path.join(a.models, f"*-l*-{t}.gguf"))
                 if (m := re.search(r"-l(\d+)-" + re.escape(t) + r"\.gguf$", p))]
        if not found:
            raise SystemExit(f"speed-vs-llamacpp: no *-l*-{t}.gguf in {a.models} (scripts/decode-bandwidth.py "
                             f"--prepare-only writes them)")
        return max(found)[1]

    def loom(path, pp, tg):
        j = json.loads(run([f"{B}/loom-bench", "-m", path, "-t", T, "-p", pp, "-n", tg, "-r", "2", "-d", a.depth,
                            *(["--bandwidth"] if tg != "0" else []), "-o", "json"]))[0]
        return j

    def llamacpp(path, pp, tg):
        return json.loads(run(["node", os.path.join(HERE, "llamacpp-speed.mjs"), path, "--threads", T,
                               "--pp", pp, "--tg", tg, "--reps", "2", "--depth", a.depth]))

    types = a.types.split(",")
    paths = {t: largest(t) for t in types}

    def read_gb_of(path):  # GB of weights a token reads: every tensor but token_embd (one row of it)
        rows = json.loads(run([f"{B}/loom-gguf", "info", "--json", path]))["tensors"]
        return sum(r["nbytes"] for r in rows if r["name"] != "token_embd.weight") / 1e9

    read_gb = {t: read_gb_of(paths[t]) for t in types}
    res = {t: {k: [] for k in ("loom_tg", "ll_tg", "loom_pct", "ll_pct", "loom_pp", "ll_pp")} for t in types}
    variant = ""
    for n in range(a.rounds):
        for t in types:
            p, r = paths[t], res[t]
            l1 = loom(p, "0", a.tg)
            ll = llamacpp(p, "0", a.tg)
            l2 = loom(p, "0", a.tg)
            variant = ll["cpu_variant"]
            gb = read_gb[t]
            read = statistics.mean(l1["samples_read_gbps"] + l2["samples_read_gbps"])
            ll_ts = statistics.median(ll["tg_ts"])
            r["loom_tg"].append(statistics.median(w / gb for w in l1["samples_weight_gbps"] + l2["samples_weight_gbps"]))
            r["ll_tg"].append(ll_ts)
            r["loom_pct"].append(100 * statistics.median(
                [w / x for w, x in zip(l1["samples_weight_gbps"] + l2["samples_weight_gbps"],
                                       l1["samples_read_gbps"] + l2["samples_read_gbps"])]))
            r["ll_pct"].append(100 * ll_ts * gb / read)
            r["loom_pp"].append(statistics.median(loom(p, a.pp, "0")["samples_ts"]))
            r["ll_pp"].append(statistics.median(llamacpp(p, a.pp, "0")["pp_ts"]))
            print(time.strftime("%H:%M:%S"), f"round {n} {t}: tg loom {r['loom_tg'][-1]:.1f} ({r['loom_pct'][-1]:.0f}%) "
                  f"llama.cpp {ll_ts:.1f} ({r['ll_pct'][-1]:.0f}%) t/s, read {read:.1f} GB/s; pp{a.pp} loom "
                  f"{r['loom_pp'][-1]:.1f} llama.cpp {r['ll_pp'][-1]:.1f} t/s", flush=True)
    print(f"\nllama.cpp: node-llama-cpp's prebuilt {variant}; medians of {a.rounds} rounds, {T} threads, "
          f"depth {a.depth}\n")
    print(f"| type | tg{a.tg} loom t/s | llama.cpp t/s | loom / llama.cpp | loom % of read | llama.cpp % of read "
          f"| pp{a.pp} loom t/s | llama.cpp t/s | loom / llama.cpp |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    med = statistics.median
    for t in types:
        r = res[t]
        print(f"| {t} | {med(r['loom_tg']):.1f} | {med(r['ll_tg']):.1f} | {med(r['loom_tg']) / med(r['ll_tg']):.2f}x "
              f"| {med(r['loom_pct']):.1f}% | {med(r['ll_pct']):.1f}% | {med(r['loom_pp']):.1f} | {med(r['ll_pp']):.1f} "
              f"| {med(r['loom_pp']) / med(r['ll_pp']):.2f}x |")


if __name__ == "__main__":
    main()
