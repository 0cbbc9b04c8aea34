#!/usr/bin/env python3
"""Decode speed of every weight type against the read bandwidth (docs/DECODE-SPEED.md, issue 23).

Per type, a llama of Llama 3.2 1B's matrix shapes (--shape 1b: n_embd 2048, n_ff 8192, 32 heads, 8
key/value heads; the small preset's 32000-token vocabulary) or of the small preset's (--shape small:
n_embd 1024, n_ff 2816, where the engine's per-node work weighs more) or of Llama 3 8B's or 70B's
layers (--shape 8b: n_embd 4096, n_ff 14336; --shape 70b: 8192, 28672; longer rows) with as many layers as
make its bytes read per token at least --min-mib (default: 3x the last-level cache, so the weights
stream from memory: a model that fits in a 300 MiB L3 decodes faster than the read bandwidth),
written in F16 (loom-gguf new) and quantized with --pure to the type, so every matrix is in that
type. A round runs the machine limits (for the record), then for each type the decode with the
read probe (loom-bench -p 0 -n N -r 2 --bandwidth): after every token the bandwidth test's buffer
is read once, and each token's weight bytes / its time is set against the mean of the reads just
before and after it. The shared host's bandwidth moves between levels within seconds, so limits
measured a minute apart from the decode often saw another level. Reported per type: the median
of the per-token ratios over all rounds, the range of the rounds' medians, and the median over
the half of the tokens whose reads found the memory slowest and the quarter that found it fastest.
--control adds a row "read": each token replaced by a plain read of the first type's weight bytes
(loom-bench --bandwidth-control), the score under this method of a decode that only read.

--levels 45,60 adds a table of the same tokens split at those read rates (GB/s): per type and
level the tokens' count, median read, median weight rate and median ratio, which shows each
kernel's own ceiling where the memory is faster than it.

--files A.gguf,B.gguf measures those files instead (e.g. downloads, or a Llama-3.2-1B-shaped file from
loom-gguf new --tied and loom-gguf quantize), one row each.

usage: scripts/decode-bandwidth.py [--bin build/bin] [--rounds 3] [--threads 2] [--n-gen 64]
                                   [--shape 1b|small|8b|70b] [--models DIR] [--types F16,Q8_0,...] [--min-mib N] [--save FILE]
                                   [--prepare-only] [--control] [--levels 45,60] [--files A.gguf,...]
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

SHAPES = {  # loom-gguf new flags past --preset small, and the file name prefix
    "1b": (["--n-embd", "2048", "--n-ff", "8192", "--n-head", "32", "--n-head-kv", "8"], "1b-"),
    # Llama 3 8B's and 70B's layers (fewer of them: the same bytes per token in longer rows)
    "8b": (["--n-embd", "4096", "--n-ff", "14336", "--n-head", "32", "--n-head-kv", "8"], "8b-"),
    "70b": (["--n-embd", "8192", "--n-ff", "28672", "--n-head", "64", "--n-head-kv", "8"], "70b-"),
    "small": ([], ""),
}
TYPES = "F16,Q8_0,Q4_0,Q4_1,Q5_0,Q5_1,Q2_K,Q3_K,Q4_K,Q5_K,Q6_K,IQ4_NL,IQ4_XS,MXFP4"


def last_level_cache_bytes():
    best = 0
    base = "/sys/devices/system/cpu/cpu0/cache"
    for idx in os.listdir(base) if os.path.isdir(base) else []:
        try:
            size = open(os.path.join(base, idx, "size")).read().strip()
        except OSError:
            continue
        mult = {"K": 2**10, "M": 2**20, "G": 2**30}.get(size[-1:], 1)
        best = max(best, int(size.rstrip("KMG")) * mult)
    return best


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
    ap.add_argument("--shape", default="1b", choices=sorted(SHAPES))
    ap.add_argument("--prepare-only", action="store_true", help="write the models, measure nothing")
    ap.add_argument("--save", help="write every token's weight and read GB/s per type to this JSON file")
    ap.add_argument("--control", action="store_true", help="add a row of plain reads timed as tokens")
    ap.add_argument("--min-mib", type=float, default=0, help="bytes read per token (default 3x the L3)")
    ap.add_argument("--levels", help="also split the tokens at these read rates, GB/s (comma separated)")
    ap.add_argument("--files", help="measure these GGUF files (comma separated) instead of written ones")
    a = ap.parse_args()
    B, T = a.bin, a.threads
    types = a.types.split(",")
    shape_flags, prefix = SHAPES[a.shape]
    os.makedirs(a.models, exist_ok=True)
    min_bytes = a.min_mib * 2**20 if a.min_mib > 0 else max(3 * last_level_cache_bytes(), 512 * 2**20)

    def read_bytes_of(path):  # every weight tensor but token_embd (one row of it), unless it is the output too
        rows = json.loads(run([f"{B}/loom-gguf", "info", "--json", path]))["tensors"]
        tied = not any(r["name"] == "output.weight" for r in rows)
        return sum(r["nbytes"] for r in rows if tied or r["name"] != "token_embd.weight")

    def make(t, n_layer, path):  # F16 with n_layer layers, then --pure quantization to t
        if os.path.exists(path):
            return path
        f16 = path if t == "F16" else os.path.join(a.models, f"{prefix}src-{n_layer}-F16.gguf")
        if not os.path.exists(f16):
            run([f"{B}/loom-gguf", "new", "--arch", "llama", "--preset", "small", "--n-layer", str(n_layer), *shape_flags,
                 "--type", "f16", "-o", f16])
        if t != "F16":
            ftype = "MXFP4_MOE" if t == "MXFP4" else t  # --pure: MXFP4_MOE's base type everywhere
            run([f"{B}/loom-gguf", "quantize", "--pure", f16, path, ftype, T])
            os.remove(f16)
        return path

    paths, read_bytes = {}, {}
    if a.files:  # given files, named by their file names
        files = a.files.split(",")
        types = [os.path.basename(f).removesuffix(".gguf") for f in files]
        paths = dict(zip(types, files))
    for t in types:
        if t not in paths:  # two layer counts give the bytes per layer and the rest (output, norms)
            b1 = read_bytes_of(make(t, 1, os.path.join(a.models, f"{prefix}l1-{t}.gguf")))
            b2 = read_bytes_of(make(t, 2, os.path.join(a.models, f"{prefix}l2-{t}.gguf")))
            n_layer = max(2, math.ceil((min_bytes - (2 * b1 - b2)) / (b2 - b1)))
            paths[t] = os.path.join(a.models, f"{prefix}l{n_layer}-{t}.gguf")
            if not os.path.exists(paths[t]):
                print(time.strftime("%H:%M:%S"), f"writing {paths[t]}", flush=True)
            make(t, n_layer, paths[t])
        read_bytes[t] = read_bytes_of(paths[t])
    print(f"bytes/token MiB (at least {min_bytes / 2**20:.0f}): " +
          ", ".join(f"{t} {b / 2**20:.2f}" for t, b in read_bytes.items()), flush=True)
    if a.prepare_only:
        return 0
    if a.control:  # a plain read of the first type's bytes in place of each token
        paths["read"], read_bytes["read"] = paths[types[0]], read_bytes[types[0]]
        types.append("read")

    def limits():
        return json.loads(run([f"{B}/loom-bench-ops", "--limits", "--json", "-t", T]))["read_gbps"]

    def tg(t):  # per token: weight bytes / its time, and the read probe around it
        j = json.loads(run([f"{B}/loom-bench", "-m", paths[t], "-t", T, "-p", "0", "-n", a.n_gen, "-r", "2",
                            "--bandwidth", "-o", "json"] + (["--bandwidth-control"] if t == "read" else [])))[0]
        return statistics.median(j["samples_ts"]), j["samples_weight_gbps"], j["samples_read_gbps"]

    def median_ratio(w, r):
        return statistics.median(x / y for x, y in zip(w, r))

    out = {t: {"ts": [], "w": [], "r": [], "rounds": []} for t in types}
    for n in range(a.rounds):
        print(time.strftime("%H:%M:%S"), f"round {n}: --limits read {limits():.1f} GB/s", flush=True)
        for t in types:
            ts, w, r = tg(t)
            o = out[t]
            o["ts"].append(ts)
            o["w"] += w
            o["r"] += r
            o["rounds"].append(median_ratio(w, r))
            print(time.strftime("%H:%M:%S"), f"round {n} {t}: {ts:.1f} t/s, {statistics.mean(w):.1f} GB/s against "
                  f"{statistics.mean(r):.1f} ({100 * o['rounds'][-1]:.1f}%), load {os.getloadavg()[0]:.1f}", flush=True)
    if a.save:
        with open(a.save, "w") as f:
            json.dump({t: {"bytes": read_bytes[t], **out[t]} for t in types}, f)
    print("| type | MiB read / token | tg t/s | GB/s | read GB/s | % of read | rounds | slower half: read GB/s, % "
          "| fastest quarter: read GB/s, % |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for t in types:
        o = out[t]
        by_read = sorted(zip(o["r"], o["w"]))  # (read, weights) per token, slowest reads first
        slow, fast = by_read[:max(1, len(by_read) // 2)], by_read[-max(1, len(by_read) // 4):]

        def part(p):
            return (f"{statistics.mean(r for r, _ in p):.1f}, "
                    f"{100 * median_ratio([w for _, w in p], [r for r, _ in p]):.1f}%")
        print(f"| {t} | {read_bytes[t] / 2**20:.1f} | {statistics.median(o['ts']):.1f} | "
              f"{statistics.mean(o['w']):.1f} | {statistics.mean(o['r']):.1f} | "
              f"{100 * median_ratio(o['w'], o['r']):.1f}% | "
              f"{100 * min(o['rounds']):.0f}–{100 * max(o['rounds']):.0f}% | {part(slow)} | {part(fast)} |")
    if a.levels:
        print_levels(types, out, sorted(float(x) for x in a.levels.split(",")), median_ratio)


def print_levels(types, out, edges, median_ratio):
    """Per type and read level: tokens, median read, median weight GB/s, median ratio."""
    bounds = [0.0] + edges + [math.inf]
    names = ([f"under {edges[0]:g} GB/s"] + [f"{lo:g}–{hi:g} GB/s" for lo, hi in zip(edges, edges[1:])] +
             [f"{edges[-1]:g} GB/s and more"])
    print()
    print("| type | " + " | ".join(f"reads {n}: tokens, read, GB/s, %" for n in names) + " |")
    print("|---|" + "---:|" * len(names))
    for t in types:
        cells = []
        for lo, hi in zip(bounds, bounds[1:]):
            p = [(r, w) for r, w in zip(out[t]["r"], out[t]["w"]) if lo <= r < hi]
            cells.append(f"{len(p)}, {statistics.median(r for r, _ in p):.1f}, {statistics.median(w for _, w in p):.1f}, "
                         f"{100 * median_ratio([w for _, w in p], [r for r, _ in p]):.1f}%" if p else "–")
        print(f"| {t} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    sys.exit(main())
