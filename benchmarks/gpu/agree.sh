#!/usr/bin/env bash
# On the GPU host: servelab beside `vllm bench serve` on a Laguna S 2.1 (dummy FP8). One warm-up pass of
# `vllm bench serve` (discarded), then the tools alternate (A B, B A, ...) so neither always runs first. /metrics is
# scraped before and after every pass, so the summary also shows the server's own TTFT, queue and prefill time
# for each tool's requests. Results under OUT; summary: bench_seed.py agree OUT. The server is started with setsid,
# so it outlives this command (SKIP_SERVE=1 reuses a running one).
# usage: [PROMPTS=file.jsonl] [SERVE_EXTRA="--no-enable-prefix-caching"] [ROUNDS=3] [SKIP_SERVE=1]
#        [FIXED_OUTPUT=ignore_eos|min_tokens] bash benchmarks/gpu/agree.sh KIT_DIR OUT
#   PROMPTS: a ShareGPT .json (vllm bench's sharegpt dataset, prompts up to 1,024 tokens) or a .jsonl of
#   {"prompt"} (its custom dataset: no length cap, needs pandas on the host); default prompts-matched.sharegpt.json
set -uo pipefail
KIT=${1:?kit dir}; OUT=${2:?out dir}; mkdir -p "$OUT"
MODEL=$KIT/models/laguna-s-2.1-dummy; URL=http://127.0.0.1:8000
PROMPTS=${PROMPTS:-benchmarks/gpu/prompts-matched.sharegpt.json}
if [[ $PROMPTS == *.jsonl ]]; then
  DATASET=(--dataset-name custom --dataset-path "$PROMPTS" --custom-output-len 256 --skip-chat-template)
else
  DATASET=(--dataset-name sharegpt --dataset-path "$PROMPTS" --sharegpt-output-len 256)
fi
export PYTHONPATH=/tmp/site:$PWD/src${PYTHONPATH:+:$PYTHONPATH}:$(ls "$PWD"/.whl/h11-*.whl 2>/dev/null | head -1):$PWD/.whl/orj
if [[ -z ${SKIP_SERVE:-} ]]; then
  SERVE_LOG=/tmp/laguna-serve.log SERVE_TIMEOUT=500 setsid bash "$KIT/serve.sh" "$MODEL" --gpu-memory-utilization 0.85 \
    --max-model-len 65536 ${SERVE_EXTRA:-} </dev/null || exit 1
fi
scrape() { curl -s $URL/metrics | grep -E "^vllm:(time_to_first_token|request_queue_time|request_prefill_time)_seconds_(sum|count)" >"$OUT/metrics-$1.txt"; }
vllm_pass() {
  scrape "vllm-$1-before"
  python3 -m vllm.entrypoints.cli.main bench serve --backend openai-chat --base-url $URL \
    --endpoint /v1/chat/completions --model laguna-s-2.1-dummy --tokenizer "$MODEL" "${DATASET[@]}" \
    --num-prompts 32 --max-concurrency 4 --disable-shuffle --ignore-eos --seed 0 --temperature 0 --percentile-metrics ttft,tpot,itl,e2el \
    --save-result --save-detailed --result-dir "$OUT" --result-filename "vllm-$1.json" >"$OUT/vllm-$1.txt" 2>&1
  echo "vllm $1 rc=$?"; scrape "vllm-$1-after"
}
ours() {
  scrape "servelab-$1-before"
  python3 benchmarks/gpu/bench_seed.py matched "$OUT" $URL "$1" "$PROMPTS" 2>&1 | tail -1
  scrape "servelab-$1-after"
}
vllm_pass warmup
for ((i = 1; i <= ${ROUNDS:-3}; i++)); do
  if ((i % 2)); then vllm_pass round$i; ours round$i; else ours round$i; vllm_pass round$i; fi
done
python3 benchmarks/gpu/bench_seed.py agree "$OUT" | tee "$OUT/agree.md"
cp /tmp/laguna-serve.log "$OUT/serve.log" 2>/dev/null
# next command, same host:  PYTHONPATH=/tmp/site:src python3 benchmarks/gpu/bench_seed.py rate OUT http://127.0.0.1:8000
