#!/usr/bin/env bash
# On the GPU host: one device call's share of the bench-at-scale runs. Runs bench_scale.sh with a server kept up
# between calls (KEEP=1), for at most BUDGET_S seconds, then packs OUT into one archive under PACK_DIR (a device
# call brings back at most 8 files), so what was measured comes back even when the budget cut a level short.
# usage: API_SERVERS=N LEVELS=... [REQ_FACTOR=4] [BUDGET_S=560] bash benchmarks/gpu/scale_step.sh KIT OUT PACK_DIR
set -uo pipefail
KIT=${1:?kit dir}; OUT=${2:?out dir}; PACK=${3:?pack dir}; mkdir -p "$OUT" "$PACK"
# its own process group, ended whole at the budget: `timeout CMD | tee` waited for the tool CMD had started
KEEP=1 setsid bash benchmarks/gpu/bench_scale.sh "$KIT" "$OUT" >>"$OUT/step.log" 2>&1 &
STEP=$!; END=$((SECONDS + ${BUDGET_S:-560}))
while kill -0 "$STEP" 2>/dev/null && ((SECONDS < END)); do sleep 1; done
kill -- -"$STEP" 2>/dev/null && echo "scale_step: budget of ${BUDGET_S:-560} s reached, step stopped" >>"$OUT/step.log"
wait "$STEP" 2>/dev/null
grep -v '^(ApiServer\|^(EngineCore' "$OUT/step.log" | tail -30
python3 benchmarks/gpu/bench_scale.py table "$OUT" >"$OUT/table.md" 2>&1
tar czf "$PACK/$(basename "$OUT")-$(date +%H%M%S).tgz" -C "$(dirname "$OUT")" "$(basename "$OUT")"
cat "$OUT/table.md"
