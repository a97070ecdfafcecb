#!/usr/bin/env bash
# On the GPU host: GuideLLM 0.8.1 and what it (and servelab's library) needs beyond the host image and the vLLM kit,
# from the wheel folders .gpu-wheels/gllm01 (pyarrow) and gllm02 (the rest), carried one per upload: each run copies
# what it finds to /tmp/gllm-wheels; once guidellm's wheel and pyarrow are both there it installs them into
# /tmp/gsite (no index, no dependency resolution). Put /tmp/gsite after /tmp/site on PYTHONPATH.
set -uo pipefail
STAGE=/tmp/gllm-wheels; mkdir -p "$STAGE"
cp .gpu-wheels/gllm0*/*.whl "$STAGE"/ 2>/dev/null
if ! ls "$STAGE"/guidellm-*.whl >/dev/null 2>&1; then echo "guidellm: parts missing"; exit 3; fi
python3 -m pip install -q --no-index --no-deps --target /tmp/gsite "$STAGE"/*.whl 2>&1 | tail -2
PYTHONPATH=/tmp/site:/tmp/gsite python3 -c "import guidellm, datasets; print('guidellm', guidellm.__version__)"
