#!/usr/bin/env bash
# On a CPU machine with PyPI: GuideLLM 0.8.1's wheels for the GPU host (Python 3.12, x86_64) into
# .gpu-wheels/gllm02, less what the host image already holds (torch and its CUDA wheels, numpy, transformers,
# tokenizers, huggingface_hub, safetensors, pyarrow, setuptools). About 32 MiB: one device upload.
set -euo pipefail
DL=${1:-/tmp/gllm-download}; DEST=.gpu-wheels/gllm02; mkdir -p "$DL" "$DEST"
python3 -m pip download -q guidellm==0.8.1 --only-binary=:all: --python-version 3.12 \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 -d "$DL"
for f in "$DL"/*.whl; do
  case $(basename "$f") in
    torch-*|nvidia_*|triton-*|sympy-*|mpmath-*|networkx-*|numpy-*|transformers-*|tokenizers-*|hf_xet-*) ;;
    safetensors-*|pyarrow-*|setuptools-*|kernels-*|huggingface_hub-*) ;;
    *) cp "$f" "$DEST"/ ;;
  esac
done
du -sh "$DEST"
