#!/usr/bin/env bash
# On the GPU host, detached (setsid): Laguna S 2.1 (dummy FP8) on :8000 at gpu_memory_utilization 0.85 and
# max-model-len 65536 (room for a 56K prefix), then SmolLM2-135M on :8001 at 0.05. Status in /tmp/pair.status.
# usage: setsid bash benchmarks/gpu/serve_pair.sh KIT_DIR >/tmp/pair.log 2>&1 < /dev/null &
set -uo pipefail
KIT=${1:?kit dir}
echo starting-laguna >/tmp/pair.status
PORT=8000 PIDFILE=/tmp/laguna.pid SERVE_LOG=/tmp/laguna.log SERVE_TIMEOUT=500 bash "$KIT/serve.sh" \
  "$KIT/models/laguna-s-2.1-dummy" --gpu-memory-utilization 0.85 --max-model-len 65536 || { echo laguna-failed >/tmp/pair.status; exit 1; }
echo starting-smollm2 >/tmp/pair.status
PORT=8001 PIDFILE=/tmp/smollm2.pid SERVE_LOG=/tmp/smollm2.log SERVE_TIMEOUT=300 bash "$KIT/serve.sh" \
  "$KIT/models/smollm2-135m" --gpu-memory-utilization 0.05 --max-model-len 8192 || { echo smollm2-failed >/tmp/pair.status; exit 1; }
echo ready >/tmp/pair.status
sleep infinity
