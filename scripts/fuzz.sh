#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (build-fuzz/) and runs the GGUF reader fuzzer for
# SECONDS (default 60) on a seed corpus of small models made by loom-gguf new at runtime
# (checkpoint_fuzz: a checkpoint made by build/bin/loom-train).
# Usage: scripts/fuzz.sh [SECONDS] [TARGET=gguf_reader_fuzz]. Crashes land in build-fuzz/crashes/.
# grammar_fuzz: hand-written GBNF seeds (loom-run --grammar). task_files_fuzz: one seed per task file kind.
# imatrix_fuzz: an importance matrix in each of llama-imatrix's formats.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
target=${2:-gguf_reader_fuzz}
jobs=${LOOM_FUZZ_JOBS:-2}

CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DLOOM_FUZZ=ON -DLOOM_TESTS=OFF >/dev/null
cmake --build build-fuzz --target "$target" -j "$jobs"

corpus=build-fuzz/corpus/$target
crashes=build-fuzz/crashes
mkdir -p "$corpus" "$crashes"

if [ "$target" = gguf_reader_fuzz ]; then
  # Seeds: small but complete models of every architecture and several tensor types.
  gguf=${LOOM_GGUF:-}
  for cand in build/bin/loom-gguf build-gguf/bin/loom-gguf; do
    [ -z "$gguf" ] && [ -x "$cand" ] && gguf=$cand
  done
  if [ -z "$gguf" ]; then
    cmake -S . -B build -G Ninja >/dev/null && cmake --build build --target loom-gguf -j "$jobs" >/dev/null && gguf=build/bin/loom-gguf || true
  fi
  if [ -n "$gguf" ] && [ -x "$gguf" ]; then
    small="--n-layer 1 --n-embd 32 --n-head 2 --n-head-kv 1 --n-ff 64 --n-vocab 257 --n-ctx-train 64"
    for arch in llama qwen2 qwen3 qwen3moe; do
      moe=""; [ "$arch" = qwen3moe ] && moe="--n-expert 2 --n-expert-used 1 --n-ff-exp 32"
      for type in f16 q8_0 q4_0; do
        "$gguf" new --arch "$arch" $small $moe --type "$type" -o "$corpus/seed-$arch-$type.gguf" >/dev/null
      done
    done
  else
    echo "fuzz.sh: loom-gguf not available; using hand-made seeds only" >&2
  fi
  printf 'GGUF\x03\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00k\x04\x00\x00\x00\x07\x00\x00\x00' \
    >"$corpus/seed-min.gguf"
fi

if [ "$target" = checkpoint_fuzz ]; then
  # Seed: a real checkpoint of a small model (two steps of loom-train).
  train=build/bin/loom-train
  gguf=build/bin/loom-gguf
  if [ -x "$train" ] && [ -x "$gguf" ]; then
    tmp=$(mktemp -d)
    "$gguf" new --arch llama --n-layer 1 --n-embd 32 --n-head 2 --n-head-kv 1 --n-ff 64 --n-vocab 257 \
      --n-ctx-train 64 -o "$tmp/m.gguf" >/dev/null
    printf 'the cat sat on the mat. %.0s' $(seq 40) >"$tmp/t.txt"
    "$train" -f "$tmp/t.txt" -m "$tmp/m.gguf" -c 16 -b 2 --steps 3 --checkpoint-every 2 \
      --checkpoint "$corpus/seed.ckpt" -o "$tmp/o.gguf" -t 1 >/dev/null 2>&1 || true
    rm -rf "$tmp"
  fi
fi

if [ "$target" = grammar_fuzz ]; then
  # Seeds: grammars using every construct, each followed by NUL and a text to feed its matcher.
  printf 'root ::= ("yes" | "no") "."\0yes.' >"$corpus/seed-alt"
  printf 'root ::= [a-c0-9_]+ [^a-z]? . "\\n\\x41\\u00e9" "a"{2,3} "b"{,2} "c"{1} "d"*\0ab1#x\nA\xc3\xa9aa' >"$corpus/seed-rep"
  printf '%s\n' '# JSON' 'root ::= value' 'value ::= object | array | string | number | "true" | "null"' \
    'object ::= "{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"' \
    'array ::= "[" ws ( value ws ("," ws value ws)* )? "]"' 'string ::= "\"" ( [^"\\] | "\\" ["\\nt] )* "\""' \
    'number ::= "-"? [0-9]+' 'ws ::= [ \t\n]*' >"$corpus/seed-json"
  printf '\0{"a": [1, {"b": "c"}], "d": true}' >>"$corpus/seed-json"
  printf '{"type": "object", "properties": {"n": {"type": "integer"}, "t": {"type": "array", "items": {"enum": ["a", 1]}, "maxItems": 2}, "s": {"type": "string", "maxLength": 4}}, "required": ["n"]}\0{"n": 12, "t": ["a"]}' >"$corpus/seed-schema"
fi

if [ "$target" = task_files_fuzz ]; then
  # Seeds: the first byte picks the reader (0 HellaSwag, 1 Winogrande, 2 multiple choice).
  printf '\x00ctx: a man walks\n2\nin.\nout.\nup.\ndown.\n' >"$corpus/seed-hellaswag"
  printf '\x05index,sentence\n0,"Sarah, not Maria, so _ won.",Sarah,Maria,1\n1,The _ sat.,cat,dog,2\n' >"$corpus/seed-winogrande"
  printf '\x02\x01\x00\x00\x00\x08\x00\x00\x00\x01\x00\x00\x00Q\x02\x00\x00\x00\x01\x00\x00\x00a\x01\x00\x00\x00b\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00' >"$corpus/seed-mc"
fi

if [ "$target" = imatrix_fuzz ]; then
  # Seeds: llama-imatrix's binary form (two entries, the chunk count and the dataset's name) and
  # its GGUF form (one entry: blk.0.attn_q.weight.in_sum2 [2, 1] and .counts [1, 1]).
  python3 - "$corpus" <<'PY'
import struct, sys
d = sys.argv[1]
def s(x): return struct.pack("<i", len(x)) + x
b = struct.pack("<i", 2) + s(b"blk.0.attn_q.weight") + struct.pack("<ii2f", 4, 2, 4.0, 8.0)
b += s(b"blk.1.ffn_down.weight") + struct.pack("<ii1f", 0, 1, 3.0) + struct.pack("<i", 10) + s(b"calib.txt")
open(d + "/seed-legacy.dat", "wb").write(b)
def gs(x): return struct.pack("<Q", len(x)) + x
kv = gs(b"imatrix.datasets") + struct.pack("<iiQ", 9, 8, 1) + gs(b"calib.txt")
kv += gs(b"imatrix.chunk_count") + struct.pack("<iI", 4, 10) + gs(b"imatrix.chunk_size") + struct.pack("<iI", 4, 512)
ti = gs(b"blk.0.attn_q.weight.in_sum2") + struct.pack("<IQQiQ", 2, 2, 1, 0, 0)
ti += gs(b"blk.0.attn_q.weight.counts") + struct.pack("<IQQiQ", 2, 1, 1, 0, 32)
h = b"GGUF" + struct.pack("<IQQ", 3, 2, 3) + kv + ti
h += b"\0" * (-len(h) % 32)
open(d + "/seed.gguf", "wb").write(h + struct.pack("<2f", 4.0, 8.0) + b"\0" * 24 + struct.pack("<f", 4.0))
PY
fi

max_len=65536
[ "$target" = checkpoint_fuzz ] && max_len=262144  # the seed checkpoint is ~100 KB
# Deterministic-ish, bounded: many small inputs, each run capped so no single input can hang.
"./build-fuzz/bin/$target" "$corpus" -max_total_time="$seconds" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$crashes/" -print_final_stats=1
