#!/usr/bin/env bash
# On this machine (PyPI reachable): the wheels that benchmarks/gateway/h200.sh installs on the H200 host, which has
# no network: servelab's gateway dependencies missing from that host's image (pydantic, httptools, orjson, ...) in
# .whl-a, LiteLLM 1.108.7 (the proxy beside which the gateway is measured) in .whl-b, for CPython 3.12 x86-64.
# Left out: what the image has (its package list: /work/.library/device/KINDS.md) and LiteLLM extras that its
# proxy does not import at start (checked: `litellm --config` served a stream with this set under Python 3.12).
# Both folders are ignored by git; one device call carries both (with the working tree, under 64 MiB).
# usage: bash benchmarks/gateway/wheels.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.whl-a/' .git/info/exclude 2>/dev/null || printf '/.whl-a/\n/.whl-b/\n' >>.git/info/exclude
ALL=$(mktemp -d)
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp -d "$ALL" \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_34_x86_64 \
  --platform manylinux_2_31_x86_64 --platform any \
  'litellm[proxy]==1.108.7' httptools orjson pydantic
ON_IMAGE="absl_py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated_doc anyio attrs certifi
charset_normalizer click filelock frozenlist fsspec h11 hf_xet httpcore httpx huggingface_hub idna jinja2
markdown_it_py markupsafe mdurl multidict numpy packaging propcache protobuf pygments pyyaml regex requests rich
safetensors six tiktoken tokenizers tqdm typing_extensions urllib3 uvloop yarl zipp prometheus_client
python_dateutil typer shellingham"
NOT_NEEDED="polars polars_runtime_32 botocore boto3 s3transfer granian psycopg psycopg_binary pyroscope_io
azure_identity azure_storage_blob azure_core msal msal_extensions jmespath pynacl inquirerpy prompt_toolkit wcwidth
pfzy rq"
rm -rf .whl-a .whl-b && mkdir -p .whl-a .whl-b
for wheel in "$ALL"/*.whl; do
  name=$(basename "$wheel" | sed -E 's/-[0-9].*//' | tr 'A-Z-' 'a-z_')
  case " $(echo $ON_IMAGE $NOT_NEEDED) " in *" $name "*) continue ;; esac
  case $name in litellm | soundfile) cp "$wheel" .whl-b/ ;; *) cp "$wheel" .whl-a/ ;; esac
done
rm -rf "$ALL"
du -sh .whl-a .whl-b
