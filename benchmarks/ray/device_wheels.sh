#!/usr/bin/env bash
# On a CPU machine with PyPI: Ray and what `benchmarks/ray/nodes.py` needs beyond the device host's image, as wheel
# parts for the GPU kit's install.sh (three uploads of at most 28 MiB; the ray wheel, 79 MB, is cut into pieces).
# Needs the kit copied to .gpu-kit (../shared/gpu/README.md). On the host, one upload a part, then:
#   bash .gpu-kit/install.sh .ray-wheels /tmp/raysite   (its last line, a vLLM version check, fails: no vLLM there)
#   pip install --no-index --no-deps --target /tmp/raysite pydantic, pydantic-core, annotated-types,
#     typing-inspection wheels (the image has no pydantic; carried from a folder of wheels)
#   PYTHONPATH=$PWD/src:/tmp/raysite PATH=/tmp/raysite/bin:$PATH python3 benchmarks/ray/nodes.py --repeats 3
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PART_MIB=28 WHEEL_LIST="$HERE/wheels-ray.txt" bash .gpu-kit/prepare-wheels.sh .ray-wheels
