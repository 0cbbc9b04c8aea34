#!/usr/bin/env python3
"""Issue-8 CPU speed measurements (docs/PERFORMANCE.md, "CPU kernels").

Each round runs, back to back: the machine limits (int8 peak, and the int8 rate with per-32 block
scales, the ceiling of a Q8_0 / Q4_0 product), tg128 of the ~300M llama in F16, the limits again,
F32 GEMM 1024^3, tg128 in Q8_0/Q4_0, pp512 in Q8_0/Q4_0, the limits a third time -- every ratio is
taken against the mean of the limits measured right before and after it (F16 decode: the first
two), then the median over rounds is reported (the shared machine drifts a lot).

usage: scripts/cpu-speed-rounds.py [--bin build/bin] [--rounds 8] [--threads 2] [--models DIR]
The models (loom-gguf new --arch llama --preset small --type T) are made in DIR if missing.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--threads", default="2")
    ap.add_argument("--models", default="/tmp/loom-speed-models")
    a = ap.parse_args()
    B, T = a.bin, a.threads
    os.makedirs(a.models, exist_ok=True)
    paths = {}
    for t in ("f16", "q8_0", "q4_0"):
        paths[t] = os.path.join(a.models, f"small-{t}.gguf")
        if not os.path.exists(paths[t]):
            run([f"{B}/loom-bench-ops", "--version"])  # fail early on a bad --bin
            run([f"{B}/loom-gguf", "new", "--arch", "llama", "--preset", "small", "--type", t, "-o", paths[t]])
    # Bytes read per generated token: every weight tensor but token_embd (of which one row is read).
    read_bytes = {}
    for t, p in paths.items():
        rows = json.loads(run([f"{B}/loom-gguf", "info", "--json", p]))["tensors"]
        read_bytes[t] = sum(r["nbytes"] for r in rows if r["name"] != "token_embd.weight")
    # Useful FLOPs per token of a 512-token prompt: 2 x matrix weights (output.weight once per
    # prompt: only the last token's logits are computed) + causal attention (QK^T and PV).
    rows = json.loads(run([f"{B}/loom-gguf", "info", "--json", paths["f16"]]))
    hp = rows["metadata"]
    mats = {r["name"]: r["shape"] for r in rows["tensors"] if len(r["shape"]) == 2}
    n_mat = sum(s[0] * s[1] for n, s in mats.items() if n not in ("token_embd.weight", "output.weight"))
    n_out = mats["output.weight"][0] * mats["output.weight"][1] if "output.weight" in mats else 0
    n_layer, n_head = hp["llama.block_count"], hp["llama.attention.head_count"]
    d_head = hp["llama.embedding_length"] // n_head
    P = 512
    attn = n_layer * n_head * 2 * 2 * d_head * (P * (P + 1) / 2)
    useful = (2 * n_mat * P + 2 * n_out + attn) / P
    print(f"bytes/token: " + ", ".join(f"{t} {b / 2**20:.2f} MiB" for t, b in read_bytes.items()) +
          f"; useful FLOP per pp512 token: {useful / 1e6:.1f} M", flush=True)
    out = []

    def limits():
        return json.loads(run([f"{B}/loom-bench-ops", "--limits", "--json", "-t", T]))

    def tg(t):
        j = json.loads(run([f"{B}/loom-bench", "-m", paths[t], "-t", T, "-p", "0", "-n", "128", "-r", "2", "-o", "json"]))
        return statistics.median(j[0]["samples_ts"])

    for r in range(a.rounds):
        row = {"load": os.getloadavg()[0]}
        # F16 decode between two limits of its own: its ratio uses their mean bandwidth (the shared
        # host's bandwidth drifts between ~26 and ~57 GB/s within a round)
        lim_a = limits()
        row["tg_f16"] = tg("f16")
        lim_b = limits()
        g = json.loads(run([f"{B}/loom-bench-ops", "perf", "-o", "MUL_MAT", "-b", "CPU", "-t", T, "-p",
                            "type_a=f32.*m=1024,n=1024,k=1024", "--json"]))
        row["gemm"] = g["results"][0]["gflops"]
        for t in ("q8_0", "q4_0"):
            row["tg_" + t] = tg(t)
        for t in ("q8_0", "q4_0"):
            j = json.loads(run([f"{B}/loom-bench", "-m", paths[t], "-t", T, "-p", str(P), "-n", "0", "-r", "2", "-o",
                                "json"]))
            row["pp_" + t] = statistics.median(j[0]["samples_ts"])
        lim_c = limits()
        # everything else against the mean of the limits before and after it
        row["bw_a"], row["bw_b"], row["bw_c"] = lim_a["read_gbps"], lim_b["read_gbps"], lim_c["read_gbps"]
        row["fma"] = (lim_b["fp32_gflops"] + lim_c["fp32_gflops"]) / 2
        row["int8"] = (lim_b["int8_gops"] + lim_c["int8_gops"]) / 2
        row["int8b"] = (lim_b["int8_block32_gops"] + lim_c["int8_block32_gops"]) / 2
        row["gemm/fma"] = row["gemm"] / row["fma"]
        for t in ("f16", "q8_0", "q4_0"):
            bw = (row["bw_a"] + row["bw_b"]) / 2 if t == "f16" else (row["bw_b"] + row["bw_c"]) / 2
            row["gbs_" + t] = row["tg_" + t] * read_bytes[t] / 1e9
            row[f"gbs_{t}/bw"] = row["gbs_" + t] / bw
        row["q8/f16"] = row["tg_q8_0"] / row["tg_f16"]
        row["q4/f16"] = row["tg_q4_0"] / row["tg_f16"]
        for t in ("q8_0", "q4_0"):
            row[f"pp_{t}/int8"] = row["pp_" + t] * useful / 1e9 / row["int8"]
            # against the int8 rate left with Q8_0's per-32 block scales (limits' int8_block32)
            row[f"pp_{t}/int8b"] = row["pp_" + t] * useful / 1e9 / row["int8b"]
        out.append(row)
        print(time.strftime("%H:%M:%S"), json.dumps({k: round(v, 3) for k, v in row.items()}), flush=True)
    for name, pick in (("median", statistics.median), ("min", min), ("max", max)):
        print(name.upper(), json.dumps({k: round(pick(r[k] for r in out), 3) for k in out[0]}))


if __name__ == "__main__":
    sys.exit(main())
