#!/usr/bin/env bash
# The test command: installs dependencies, builds, runs every test tier that needs no GPU
# (ctest), then the libFuzzer targets for a bounded time.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup-deps.sh
./scripts/build.sh
(cd "${LOOM_BUILD_DIR:-build}" && ctest --output-on-failure -j2 --timeout 900)
# libFuzzer: the GGUF reader (60 s, as the foundation issue asks), the tokenizer (30 s).
./scripts/fuzz.sh "${LOOM_FUZZ_SECONDS:-60}" gguf_reader_fuzz
./scripts/fuzz.sh "${LOOM_FUZZ_TOKENIZER_SECONDS:-30}" tokenizer_fuzz
# Checkpoint files (20 s: a seed checkpoint and the state parser behind the checksum).
./scripts/fuzz.sh "${LOOM_FUZZ_CHECKPOINT_SECONDS:-20}" checkpoint_fuzz
# GBNF grammars (20 s: the parser and the matcher behind loom-run --grammar).
./scripts/fuzz.sh "${LOOM_FUZZ_GRAMMAR_SECONDS:-20}" grammar_fuzz
# The task files of --hellaswag, --winogrande and --multiple-choice (10 s).
./scripts/fuzz.sh "${LOOM_FUZZ_TASKS_SECONDS:-10}" task_files_fuzz
# Importance matrices of loom-gguf quantize --imatrix (10 s: both of llama-imatrix's formats).
./scripts/fuzz.sh "${LOOM_FUZZ_IMATRIX_SECONDS:-10}" imatrix_fuzz
