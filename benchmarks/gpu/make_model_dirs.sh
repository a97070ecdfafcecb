#!/usr/bin/env bash
# Build servable model folders for the GPU kit from the configs in benchmarks/gpu/models: each gets
# the kit's stand-in tokenizer (dummy weights sample any id; these folders are for capacity runs).
# usage: make_model_dirs.sh KIT_DIR      (KIT_DIR: a copy of ../shared/gpu, e.g. .gpu-kit)
set -euo pipefail
KIT=${1:?kit dir}
HERE=$(cd "$(dirname "$0")" && pwd)
for dir in "$HERE"/models/*/; do
  name=$(basename "$dir")
  dest="$KIT/models/$name"
  mkdir -p "$dest"
  cp "$dir"/* "$dest/"
  from=smollm2-135m  # a folder may name the kit folder whose tokenizer covers its vocabulary (tokenizer-from)
  [ -f "$dir/tokenizer-from" ] && from=$(cat "$dir/tokenizer-from")
  for f in tokenizer.json tokenizer_config.json chat_template.jinja generation_config.json; do
    [ -f "$dest/$f" ] || cp "$KIT/models/$from/$f" "$dest/"
  done
  echo "$dest"
done
