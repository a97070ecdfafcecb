#!/usr/bin/env bash
# llama-server's SWA cache beside servelab's rule: a tiny Gemma-3 GGUF (benchmarks/llamacpp/swa_model.py, random
# weights, 10 sliding-window layers of 512 and 2 global) started once per setting, its start-up log kept.
# usage: benchmarks/llamacpp/swa_buffers.sh OUT_DIR   (the model is written to OUT_DIR/model)
set -uo pipefail
OUT=${1:?out dir}; mkdir -p "$OUT"
PY=${PYTHON:-.venv/bin/python}
BIN=$($PY -c 'from servelab.engines.llamacpp_build import binary_path; print(binary_path())')
$PY benchmarks/llamacpp/swa_model.py "$OUT/model" || exit 1
PORT=${PORT:-18799}
source "$(dirname "$0")/start_once.sh"
run() {
  local name=$1; shift
  start_once "$name" "$OUT/model/tiny-gemma3.gguf" -t 1 "$@"
  echo "$name: $(grep -E 'creating|llama_kv_cache: size' "$OUT/$name.log" | sed 's/.*: //' | tr '\n' ' ')"
  gzip -f "$OUT/$name.log"
}
run swa-c8k-np2 -c 8192 -np 2
run swa-c32k-np4 -c 32768 -np 4
run swa-c2k-np2 -c 2048 -np 2
run swa-c16k-np1-q8 -c 16384 -np 1 -ctk q8_0 -ctv q8_0 -fa on
run swa-c8k-np2-ub256 -c 8192 -np 2 -ub 256 -b 256
