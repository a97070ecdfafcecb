#!/usr/bin/env bash
# On the H200 host (no network): servelab's and LiteLLM's wheels from .whl-a and .whl-b (carried), then the gateway
# benchmarks whose raw output docs/gateway-bench.md quotes, into OUT: legs at one stream (requests apart, and back to
# back in blocks), the one-stream A/B of the polling settings beside a bare relay (uvloop, and compiled: relay.c), and
# 1/64/256 streams beside LiteLLM.
# .whl-a and .whl-b together pass the 64 MiB a call carries beside the tree: an earlier call may install one
# (`python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl-a/*.whl`), this the other.
# usage: [COMMIT=sha] [LEGS=0] bash benchmarks/gateway/h200.sh OUT
set -uo pipefail
OUT=${1:?out dir}; mkdir -p "$OUT"
for d in .whl-a .whl-b; do
  [[ -d $d ]] && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $d/*.whl 2>&1 | tail -2
done
export PYTHONPATH=/tmp/site:$PWD/src LITELLM_LOCAL_MODEL_COST_MAP=True
printf '#!/bin/sh\nexec python3 -c "import sys; sys.argv[0] = \\"litellm\\"; from litellm import run_server; run_server()" "$@"\n' \
  >/tmp/litellm-run && chmod +x /tmp/litellm-run
echo "${COMMIT:-$(git log --oneline -1 2>/dev/null)}" >"$OUT/commit.txt"  # COMMIT from the caller: the host's .git may lag the tree
G='python3 benchmarks/gateway'
V=(--variant 'default={}' --variant 'no warm={"warm_on_linger":false}' --variant 'no poll={"first_byte_poll_ms":0}'
   --variant 'busy poll={"busy_poll_us":3000}')
if [[ ${LEGS:-1} != 0 ]]; then
  $G/legs.py --requests 300 --gap-ms 5 --relay "${V[@]}" 2>&1 | tee "$OUT/legs-apart.txt"
  $G/legs.py --requests 600 --blocks 12 --gap-ms 0 --relay "${V[@]}" 2>&1 | tee "$OUT/legs-closed-loop.txt"
fi
$G/run.py --levels 1 --rounds 4 --seconds 4 --workers 1 --litellm none --tokens 1,3 --relay --c-relay \
  --variant 'no-poll={"first_byte_poll_ms":0}' --variant 'no-warm={"warm_on_linger":false}' \
  --variant 'busy-poll={"busy_poll_us":3000}' 2>&1 | tee "$OUT/one-stream.txt"
$G/run.py --levels 1,64,256 --rounds 3 --seconds 4 --workers 4 --litellm /tmp/litellm-run 2>&1 | tee "$OUT/levels.txt"
