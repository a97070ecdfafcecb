#!/usr/bin/env bash
# Start servelab's llama-server (built by `make llama-server`) on SmolLM2's GGUF once per setting, keep its
# start-up log (KV cache and compute buffer sizes, at -lv 4), stop it. docs/llamacpp.md reads the logs.
# usage: benchmarks/llamacpp_buffers.sh OUT_DIR
set -uo pipefail
OUT=${1:?out dir}; mkdir -p "$OUT"
PY=${PYTHON:-.venv/bin/python}
BIN=$($PY -c 'from servelab.engines.llamacpp_build import binary_path; print(binary_path())')
GGUF=$($PY -c 'from servelab.engines.convert_gguf import find_gguf; print(find_gguf())')
PORT=${PORT:-18798}
source "$(dirname "$0")/llamacpp/start_once.sh"
run() {
  local name=$1; shift
  start_once "$name" "$GGUF" -t 2 "$@"
  echo "$name: $(grep -E 'llama_kv_cache: size' "$OUT/$name.log" | sed 's/.*size =/size =/') | $(grep 'compute buffer size' "$OUT/$name.log" | sed 's/.*compute/compute/')"
}
run c8k-np2 -c 8192 -np 2
run c8k-np4 -c 8192 -np 4
run c32k-np4 -c 32768 -np 4
run c16k-np1-q8 -c 16384 -np 1 -ctk q8_0 -ctv q8_0 -fa on
run c4k-np1-ub256 -c 4096 -np 1 -ub 256 -b 256
run c64k-np8-q4 -c 65536 -np 8 -ctk q4_0 -ctv q4_0 -fa on
run c10k-np3 -c 10000 -np 3
run c8k-np4-faoff -c 8192 -np 4 -fa off
run c32k-np4-faoff -c 32768 -np 4 -fa off
