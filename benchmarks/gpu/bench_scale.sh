#!/usr/bin/env bash
# On the GPU host: vLLM + SmolLM2-135M (dummy weights) with API_SERVERS API-server processes, then at each of
# LEVELS streams (synthetic 128 tokens in, 256 out, REQ_FACTOR x streams requests, at least MIN_REQUESTS so a
# 64-stream step lasts long enough for the engine's series to show its rate): servelab with 1 and with 4 workers,
# `vllm bench serve` and GuideLLM (when GUIDELLM_SITE holds it: install_guidellm.sh), each wrapped so the engine's
# own series are sampled beside it. Results under OUT; table: python3 benchmarks/gpu/bench_scale.py table OUT...
# A server already up with the same API_SERVERS (started by an earlier call, in its own session) is reused; KEEP=1
# leaves the server running (setsid) for the next call.
# usage: [REQ_FACTOR=2] [MIN_REQUESTS=512] [GUIDELLM_LEVELS=...] [VLLM_LEVELS=...] [API_SERVERS=1] [LEVELS=64,256,512,1024] [GUIDELLM_SITE=/tmp/gsite] [CONFIRM=1]
#        [KEEP=1] bash benchmarks/gpu/bench_scale.sh KIT OUT
set -uo pipefail
KIT=${1:?kit dir}; OUT=${2:?out dir}; mkdir -p "$OUT"
API=${API_SERVERS:-1}; LEVELS=${LEVELS:-64,256,512,1024}; GSITE=${GUIDELLM_SITE:-/tmp/glsite}
MODEL=$KIT/models/smollm2-135m; URL=http://127.0.0.1:8000
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
echo "$API" >"$OUT/api-servers"
up() { [[ -f /tmp/vllm-serve.pid ]] && kill -0 "$(cat /tmp/vllm-serve.pid)" 2>/dev/null; }
if up && [[ $(cat /tmp/vllm-serve.api 2>/dev/null) != "$API" ]]; then
  kill "$(cat /tmp/vllm-serve.pid)"; while up; do sleep 1; done; sleep 3
fi
if ! up; then
  PYTHONPATH=/tmp/site SERVE_LOG=$OUT/serve.log SERVE_TIMEOUT=300 setsid bash "$KIT/serve.sh" "$MODEL" \
    --api-server-count "$API" --max-model-len 2048 </dev/null 2>&1 | tail -5 || exit 1
  echo "$API" >/tmp/vllm-serve.api
fi
export PYTHONPATH=/tmp/site:$PWD/src:/tmp/gsite  # the clients: servelab's library (its wheels: .whl-a)
GPATH=$GSITE:/tmp/site  # GuideLLM's own set first: its versions, in its process only
W="python3 benchmarks/gpu/bench_scale.py wrap $OUT"
run() { timeout "${RUN_TIMEOUT:-150}" "$@" || echo "rc=$? for $*"; }
for C in ${LEVELS//,/ }; do
  N=$((${REQ_FACTOR:-2} * C)); N=$((N < ${MIN_REQUESTS:-512} ? ${MIN_REQUESTS:-512} : N))
  run $W servelab-x1-c$C $URL -- python3 benchmarks/gpu/bench_scale.py servelab "$OUT" servelab-x1-c$C $URL $C 1 $N
  run $W servelab-x4-c$C $URL -- python3 benchmarks/gpu/bench_scale.py servelab "$OUT" servelab-x4-c$C $URL $C 4 $N
  [[ ,${VLLM_LEVELS:-$LEVELS}, == *,$C,* ]] &&
  run $W vllm-c$C $URL -- python3 -m vllm.entrypoints.cli.main bench serve --backend openai-chat --base-url $URL \
    --endpoint /v1/chat/completions --model smollm2-135m --tokenizer "$MODEL" --dataset-name random \
    --random-input-len 128 --random-output-len 256 --num-prompts $N --max-concurrency $C --ignore-eos \
    --num-warmups 1 --save-result --result-dir "$OUT" --result-filename vllm-c$C.json
  if [[ ,${GUIDELLM_LEVELS:-$LEVELS}, == *,$C,* ]] && PYTHONPATH=$GPATH python3 -c "import guidellm" 2>/dev/null
  then
    run $W guidellm-c$C $URL -- env PYTHONPATH=$GPATH python3 -c "from guidellm.__main__ import cli; cli()" run \
      --backend kind=openai_http,target=$URL --profile kind=concurrent,streams=$C \
      --data kind=synthetic_text,prompt_tokens=128,output_tokens=256 --tokenizer kind=hf_auto,model="$MODEL" \
      --constraint kind=max_requests,count=$N --output kind=json,path="$OUT/guidellm-c$C.json" \
      --disable-console-interactive
  fi
done
[[ -n ${KEEP:-} ]] || { kill "$(cat /tmp/vllm-serve.pid)" 2>/dev/null; sleep 3; }
python3 benchmarks/gpu/bench_scale.py table "$OUT" | tee "$OUT/table.md"
