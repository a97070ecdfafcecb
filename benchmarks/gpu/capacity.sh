#!/usr/bin/env bash
# On the GPU host: start each model folder with vLLM (dummy weights, shared/gpu kit's serve.sh),
# keep its start-up log, /metrics and nvidia-smi reading, stop it, and pack it all into one tarball.
# usage: capacity.sh KIT_DIR TARBALL MODEL_DIR [MODEL_DIR ...]
# Read the result here with: servelab plan MODEL_DIR --calibrate LOG (docs/plan-calibration.md).
set -uo pipefail
KIT=${1:?kit dir}; TARBALL=${2:?tarball}; shift 2
WORK=$(mktemp -d)
for model in "$@"; do
  name=$(basename "$model")
  t0=$(date +%s)
  SERVE_LOG="$WORK/$name.log" SERVE_TIMEOUT=${SERVE_TIMEOUT:-400} bash "$KIT/serve.sh" "$model" >"$WORK/$name.serve.txt" 2>&1
  rc=$?
  curl -s --max-time 5 http://127.0.0.1:8000/metrics >"$WORK/$name.metrics" || true
  nvidia-smi --query-gpu=name,memory.used,memory.total,driver_version --format=csv >"$WORK/$name.smi" 2>&1 || true
  pid=$(cat /tmp/vllm-serve.pid 2>/dev/null)
  [ -n "$pid" ] && kill "$pid" 2>/dev/null
  for _ in $(seq 60); do [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
  pkill -9 -f "vllm.entrypoints" 2>/dev/null; sleep 3
  echo "$name: serve rc=$rc, $(( $(date +%s) - t0 )) s"
  grep -hE "Model loading took|Available KV cache memory|KV cache size|Maximum concurrency|Error|error:" "$WORK/$name.log" | tail -6
done
tar czf "$TARBALL" -C "$WORK" .
