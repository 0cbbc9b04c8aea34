#!/usr/bin/env python3
"""Decode speed of every weight type against the read bandwidth (docs/PERFORMANCE.md, "Decode per
weight type", issue 23).

The ~300M llama (loom-gguf new --arch llama --preset small --type f16) is quantized with --pure to
each type, so every matrix but the fallbacks is in that type. A round runs the machine limits, then
for each type the decode (loom-bench -p 0 -n N -r 2) followed by the limits again; each decode's
weight bytes x tokens/s is divided by the mean read bandwidth of the limits right before and after
it (the shared host's bandwidth drifts within minutes). Medians over rounds are reported.

usage: scripts/decode-bandwidth.py [--bin build/bin] [--rounds 3] [--threads 2] [--n-gen 64]
                                   [--models DIR] [--types F16,Q8_0,...]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

TYPES = "F16,Q8_0,Q4_0,Q4_1,Q5_0,Q5_1,Q2_K,Q3_K,Q4_K,Q5_K,Q6_K,IQ4_NL,IQ4_XS,MXFP4"


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", default="2")
    ap.add_argument("--n-gen", default="64")
    ap.add_argument("--models", default="/tmp/loom-speed-models")
    ap.add_argument("--types", default=TYPES)
    a = ap.parse_args()
    B, T = a.bin, a.threads
    types = a.types.split(",")
    os.makedirs(a.models, exist_ok=True)
    f16 = os.path.join(a.models, "small-F16.gguf")
    if not os.path.exists(f16):
        run([f"{B}/loom-gguf", "new", "--arch", "llama", "--preset", "small", "--type", "f16", "-o", f16])
    paths, read_bytes = {}, {}
    for t in types:
        paths[t] = os.path.join(a.models, f"small-{t}.gguf")
        if not os.path.exists(paths[t]):
            ftype = "MXFP4_MOE" if t == "MXFP4" else t  # --pure: MXFP4_MOE's base type everywhere
            run([f"{B}/loom-gguf", "quantize", "--pure", f16, paths[t], ftype, T])
        # bytes read per generated token: every weight tensor but token_embd (one row of it is read)
        rows = json.loads(run([f"{B}/loom-gguf", "info", "--json", paths[t]]))["tensors"]
        read_bytes[t] = sum(r["nbytes"] for r in rows if r["name"] != "token_embd.weight")
    print("bytes/token MiB: " + ", ".join(f"{t} {b / 2**20:.2f}" for t, b in read_bytes.items()), flush=True)

    def limits():
        return json.loads(run([f"{B}/loom-bench-ops", "--limits", "--json", "-t", T]))["read_gbps"]

    def tg(t):
        j = json.loads(run([f"{B}/loom-bench", "-m", paths[t], "-t", T, "-p", "0", "-n", a.n_gen, "-r", "2", "-o",
                            "json"]))
        return statistics.median(j[0]["samples_ts"])

    out = {t: [] for t in types}
    for r in range(a.rounds):
        bw = limits()
        for t in types:
            ts = tg(t)
            bw_after = limits()
            bw_mean = (bw + bw_after) / 2
            gbs = ts * read_bytes[t] / 1e9
            out[t].append({"ts": ts, "gbs": gbs, "bw": bw_mean, "ratio": gbs / bw_mean})
            print(time.strftime("%H:%M:%S"), f"round {r} {t}: {ts:.1f} t/s, {gbs:.1f} GB/s of {bw_mean:.1f} "
                  f"({100 * gbs / bw_mean:.1f}%), load {os.getloadavg()[0]:.1f}", flush=True)
            bw = bw_after
    print("| type | MiB read / token | tg t/s | GB/s | bandwidth GB/s | % of bandwidth | range |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for t in types:
        m = {k: statistics.median(x[k] for x in out[t]) for k in ("ts", "gbs", "bw", "ratio")}
        lo, hi = min(x["ratio"] for x in out[t]), max(x["ratio"] for x in out[t])
        print(f"| {t} | {read_bytes[t] / 2**20:.1f} | {m['ts']:.1f} | {m['gbs']:.1f} | {m['bw']:.1f} | "
              f"{100 * m['ratio']:.1f}% | {100 * lo:.0f}–{100 * hi:.0f}% |")


if __name__ == "__main__":
    sys.exit(main())
