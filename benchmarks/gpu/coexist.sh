#!/usr/bin/env bash
# On the GPU host: the coexist probe beside Laguna S 2.1 (dummy FP8) in one configuration. Stops a running server,
# starts one with SERVE_EXTRA (e.g. "--max-num-batched-tokens 512"), under CUDA MPS with the LLM capped at MPS_PCT%
# of the SMs when MPS_PCT is set (the probe then runs uncapped under the same MPS server), then runs
# benchmarks/gpu/coexist_run.py. Prefix caching is off, so every long prompt is a full prefill.
# SKIP_SERVE=1 uses the server already up (started by agree.sh with the same flags).
# usage: [SERVE_EXTRA=...] [MPS_PCT=85] [SKIP_SERVE=1] [AVATAR=1] bash benchmarks/gpu/coexist.sh KIT_DIR OUT LABEL
set -uo pipefail
KIT=${1:?kit dir}; OUT=${2:?out dir}; LABEL=${3:?label}; mkdir -p "$OUT"
MODEL=$KIT/models/laguna-s-2.1-dummy; URL=http://127.0.0.1:8000
export PYTHONPATH=/tmp/site:$PWD/src:/tmp/gsite  # gsite: servelab's own wheels (benchmarks/gpu/install_guidellm.sh)
[[ -n ${SKIP_SERVE:-} ]] || bash benchmarks/gpu/stop_server.sh  # a previous step's server, an MPS daemon
SHARING=time-sliced
if [[ -n ${MPS_PCT:-} ]]; then
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
  mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
  pgrep -f '^nvidia-cuda-mps-control' >/dev/null || nvidia-cuda-mps-control -d || { echo "MPS unavailable"; exit 3; }
  SHARING=mps:$MPS_PCT
fi
[[ -n ${SKIP_SERVE:-} ]] || ( [[ -n ${MPS_PCT:-} ]] && export CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$MPS_PCT
  SERVE_LOG=/tmp/laguna-serve-$LABEL.log SERVE_TIMEOUT=500 setsid bash "$KIT/serve.sh" "$MODEL" \
    --gpu-memory-utilization 0.85 --max-model-len 65536 --no-enable-prefix-caching ${SERVE_EXTRA:-} </dev/null ) || exit 1
timeout -k 10 $((${BUDGET_S:-590} - SECONDS)) python3 benchmarks/gpu/coexist_run.py "$OUT" $URL "$LABEL" "$SHARING" 2>&1 | tail -40
grep -hE "max_num_batched_tokens|Chunked prefill" /tmp/laguna-serve*.log | head -3 >"$OUT/serve-$LABEL.txt"
