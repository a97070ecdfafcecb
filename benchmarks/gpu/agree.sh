#!/usr/bin/env bash
# On the GPU host: servelab beside `vllm bench serve` on a warmed Laguna S 2.1 (dummy FP8). One warm-up pass of
# `vllm bench serve` (discarded) fills the prefix cache with the 32 prompts, so every measured pass of either tool
# sees the same warm cache; the tools alternate (A B, B A, A B) so neither always runs first. Results under OUT;
# summary: bench_seed.py agree OUT. The server is started with setsid, so it outlives this command: the next
# command on the same host can run the SLO search over rate against it (see below).
# usage: [PROMPTS=file.jsonl] [SERVE_EXTRA="--no-enable-prefix-caching"] bash benchmarks/gpu/agree.sh KIT_DIR OUT
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
export PYTHONPATH=/tmp/site:$PWD/src${PYTHONPATH:+:$PYTHONPATH}:$(ls "$PWD"/.whl/h11-*.whl 2>/dev/null | head -1)
SERVE_LOG=/tmp/laguna-serve.log SERVE_TIMEOUT=500 setsid bash "$KIT/serve.sh" "$MODEL" --gpu-memory-utilization 0.85 \
  --max-model-len 65536 ${SERVE_EXTRA:-} </dev/null || exit 1
vllm_pass() {
  python3 -m vllm.entrypoints.cli.main bench serve --backend openai-chat --base-url $URL \
    --endpoint /v1/chat/completions --model laguna-s-2.1-dummy --tokenizer "$MODEL" "${DATASET[@]}" \
    --num-prompts 32 --max-concurrency 4 --ignore-eos --seed 0 --temperature 0 --percentile-metrics ttft,tpot,itl,e2el \
    --save-result --save-detailed --result-dir "$OUT" --result-filename "vllm-$1.json" >"$OUT/vllm-$1.txt" 2>&1
  echo "vllm $1 rc=$?"
}
ours() { python3 benchmarks/gpu/bench_seed.py matched "$OUT" $URL "$1" "$PROMPTS" 2>&1 | tail -1; }
vllm_pass warmup
vllm_pass round1; ours round1
ours round2; vllm_pass round2
vllm_pass round3; ours round3
python3 benchmarks/gpu/bench_seed.py agree "$OUT" | tee "$OUT/agree.md"
cp /tmp/laguna-serve.log "$OUT/serve.log"
# next command, same host:  PYTHONPATH=/tmp/site:src python3 benchmarks/gpu/bench_seed.py rate OUT http://127.0.0.1:8000
