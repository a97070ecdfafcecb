#!/usr/bin/env bash
# On the GPU host: stop the vLLM servers a previous step left (serve.sh's pid files), wait until their GPU memory
# is back, and quit a CUDA MPS daemon coexist.sh started (MPS_PCT), so the next step starts on a bare GPU.
# usage: bash benchmarks/gpu/stop_server.sh
set -uo pipefail
for pidfile in /tmp/vllm-serve.pid /tmp/vllm-external.pid; do
  [[ -f $pidfile ]] || continue
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then kill "$pid"; while kill -0 "$pid" 2>/dev/null; do sleep 1; done; fi
  rm -f "$pidfile"
done
if pgrep -f '^nvidia-cuda-mps-control' >/dev/null; then
  echo quit | CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe nvidia-cuda-mps-control
  while pgrep -f '^nvidia-cuda-mps-server' >/dev/null || pgrep -f '^nvidia-cuda-mps-control' >/dev/null; do sleep 1; done
fi
for _ in $(seq 90); do  # wait until the stopped servers' memory is back
  (($(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1) < 4000)) && exit 0; sleep 1
done
echo "stop_server.sh: GPU memory still in use after 90 s" >&2
