#!/usr/bin/env bash
# On the GPU host: GuideLLM 0.8.1 and what it (and servelab's library) needs beyond the host image and the vLLM kit,
# from the wheel folder .gpu-wheels/gllm02 (`bash benchmarks/gpu/guidellm_wheels.sh` makes it: GuideLLM 0.8.1 and
# its dependencies less what the image holds: torch, numpy, transformers, tokenizers, huggingface_hub, pyarrow),
# carried in one upload: it is copied to /tmp/gllm-wheels and installed into /tmp/glsite (no index, no dependency
# resolution). GuideLLM runs with /tmp/glsite first on its PYTHONPATH (its own process only: bench_scale.sh).
set -uo pipefail
STAGE=/tmp/gllm-wheels; mkdir -p "$STAGE"
cp .gpu-wheels/gllm0*/*.whl "$STAGE"/ 2>/dev/null
if ! ls "$STAGE"/guidellm-*.whl >/dev/null 2>&1; then echo "guidellm: parts missing"; exit 3; fi
python3 -m pip install -q --no-index --no-deps --target /tmp/glsite "$STAGE"/*.whl 2>&1 | tail -2
PYTHONPATH=/tmp/glsite:/tmp/site python3 -c "import guidellm, datasets; print('guidellm', guidellm.__version__)"
