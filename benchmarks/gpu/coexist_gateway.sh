#!/usr/bin/env bash
# On the GPU host: the coexist mitigations beside Laguna S 2.1 (dummy FP8) in one run:
# the plain engine on :8000, and a servelab gateway on :8900 in front of it whose external route is a second vLLM
# (SmolLM2-135M on :8001 with a 64K context: its tokenizer makes more tokens of the prompts, standing in for an external API) that takes long prefills while the
# gateway's realtime lease is held; the voice and avatar stand-ins together through the seed's layers, each LLM load
# also with no probe. Smaller batches (--max-num-batched-tokens) and the MPS cap need their own server start: run
# coexist.sh with SERVE_EXTRA / MPS_PCT and AVATAR=1 beside this.
# REALTIME_BUDGET: the prompt tokens the gateway still sends to the local engine while the lease is held (0, the
# default measured 2026-12-03: every new request goes external, short chats too).
# usage: [REALTIME_BUDGET=0] bash benchmarks/gpu/coexist_gateway.sh KIT_DIR OUT
set -uo pipefail
KIT=${1:?kit dir}; OUT=${2:?out dir}; mkdir -p "$OUT"
export PYTHONPATH=/tmp/site:$PWD/src:/tmp/gsite HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
bash benchmarks/gpu/stop_server.sh  # a previous step's server, an MPS daemon
PYTHONPATH=/tmp/site SERVE_LOG=$OUT/laguna.log SERVE_TIMEOUT=500 setsid bash "$KIT/serve.sh" \
  "$KIT/models/laguna-s-2.1-dummy" --gpu-memory-utilization 0.85 --max-model-len 65536 --no-enable-prefix-caching \
  </dev/null | tail -3 || exit 1
PYTHONPATH=/tmp/site VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 PORT=8001 PIDFILE=/tmp/vllm-external.pid \
  SERVE_LOG=$OUT/external.log SERVE_TIMEOUT=300 setsid bash "$KIT/serve.sh" "$KIT/models/smollm2-135m" \
  --gpu-memory-utilization 0.08 --max-model-len 65536 --served-model-name smollm2-135m --enforce-eager </dev/null | tail -3 || exit 1
cat >"$OUT/gateway.toml" <<TOML
host = "127.0.0.1"
port = 8900
[local]
url = "http://127.0.0.1:8000"
read_timeout_s = 600
[external]
url = "http://127.0.0.1:8001/v1"
model = "smollm2-135m"
[policy]
prefill_threshold_tokens = 8000
realtime_prefill_budget_tokens = ${REALTIME_BUDGET:-0}
[keys]
admin = ["bench-admin"]
TOML
python3 -c "
import sys; from pathlib import Path; from servelab.gateway import load_config, run
run(load_config(Path(sys.argv[1])))" "$OUT/gateway.toml" >"$OUT/gateway.log" 2>&1 &
GW=$!
sleep 3
AVATAR=1 MITIGATIONS="gateway=http://127.0.0.1:8900" LEASE="gateway=bench-admin" \
  timeout -k 10 $((${BUDGET_S:-590} - SECONDS)) python3 benchmarks/gpu/coexist_run.py "$OUT" http://127.0.0.1:8000 gateway time-sliced 2>&1 | tail -40
kill $GW; kill "$(cat /tmp/vllm-external.pid)" "$(cat /tmp/vllm-serve.pid)" 2>/dev/null
