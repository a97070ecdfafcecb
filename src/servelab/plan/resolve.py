"""MODEL → config: a bundled preset, a local folder or config.json, or the local Hugging Face cache."""

from __future__ import annotations

import itertools
import json
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from servelab.core.errors import UsageError
from servelab.core.known_keys import meant
from servelab.plan.config import spec_from_config
from servelab.plan.spec import ModelSpec


@dataclass(frozen=True, slots=True)
class Resolved:
    spec: ModelSpec
    meta: dict[str, Any] = field(default_factory=dict)  # preset notes: source, known checkpoint sizes
    weights_bytes: int | None = None  # exact, from local safetensors headers
    weights_source: str = ""
    model_id: str = ""  # what `vllm serve` takes: the Hugging Face id of a preset, a folder's path

    @property
    def serve_as(self) -> str:
        return self.model_id or self.spec.name


def preset_names() -> list[str]:
    folder = resources.files("servelab.plan") / "presets"
    return sorted(p.name.removesuffix(".json") for p in folder.iterdir() if p.name.endswith(".json"))


def load_preset(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    path = resources.files("servelab.plan") / "presets" / f"{name}.json"
    if not path.is_file():
        raise UsageError(f"no preset {name!r}", hint=f"presets: {', '.join(preset_names())}")
    config = json.loads(path.read_text())
    return config, config.pop("_servelab", {})


def hf_cache_config(name: str) -> Path | None:
    """The newest snapshot's config.json of hub id ``name`` in the local Hugging Face cache (nothing is fetched)."""
    hub = Path(
        os.environ.get("HF_HUB_CACHE")
        or Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")) / "hub"
    )
    snapshots = hub / f"models--{name.replace('/', '--')}" / "snapshots"
    configs = sorted(snapshots.glob("*/config.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    return configs[0] if configs else None


MAX_HEADER = 256 * 2**20  # a safetensors header is JSON a few MiB long even for the largest checkpoints


def safetensors_bytes(folder: Path) -> int | None:
    """Exact tensor bytes from the safetensors headers in ``folder`` (no tensor data is read). Each tensor's
    ``data_offsets`` must lie in order within its file's data, as the format requires: a file that breaks that is
    refused by name, never summed into a wrong (or negative) figure."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    return sum(_safetensors_file(path) for path in files)


def _safetensors_file(path: Path) -> int:
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            raw = handle.read(8)
            if len(raw) < 8:
                raise ValueError("shorter than its 8-byte header length")
            (length,) = struct.unpack("<Q", raw)
            if not 2 <= length <= min(MAX_HEADER, size - 8):
                raise ValueError(f"a header length of {length:,} bytes in a file of {size:,}")
            header = json.loads(handle.read(length))
        if not isinstance(header, dict):
            raise ValueError("its header is not a JSON object")
        data = size - 8 - length
        spans = []
        for key, info in header.items():
            if key == "__metadata__":
                continue
            offsets = info.get("data_offsets") if isinstance(info, dict) else None
            if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)
                    and 0 <= offsets[0] <= offsets[1] <= data):  # fmt: skip
                raise ValueError(f"tensor {str(key)[:80]!r} has data_offsets {str(offsets)[:80]} outside its data")
            spans.append((offsets[0], offsets[1]))
        spans.sort()
        if any(later[0] < earlier[1] for earlier, later in itertools.pairwise(spans)):
            raise ValueError("two tensors' data_offsets overlap")  # the format lays them end to end
        return sum(end - start for start, end in spans)
    except (OSError, ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise UsageError(f"{path}: not a safetensors file servelab can read ({exc})",
                         hint="give the weights' size with --weights, or remove the file") from None  # fmt: skip


def gguf_bytes(folder: Path) -> tuple[int, str] | None:
    """Tensor bytes of the GGUF files in ``folder``: exact from their headers (the ``gguf`` package),
    else the file sizes (a slight over-estimate: metadata and padding)."""
    files = sorted(folder.glob("*.gguf"))
    if not files:
        return None
    try:
        from gguf import GGUFReader  # the embedded extra installs it
    except ImportError:
        return sum(f.stat().st_size for f in files), "GGUF file sizes (pip install gguf for exact tensor bytes)"
    total = 0
    for path in files:
        try:
            total += sum(int(t.n_bytes) for t in GGUFReader(path).tensors)
        except Exception as exc:  # the gguf package raises what it likes on a file that is not GGUF
            raise UsageError(f"{path}: not a GGUF file servelab can read ({type(exc).__name__}: {str(exc)[:200]})",
                             hint="give the weights' size with --weights, or remove the file") from None  # fmt: skip
    return total, "GGUF tensor headers"


def local_weights(folder: Path) -> tuple[int | None, str]:
    exact = safetensors_bytes(folder)
    if exact is not None:
        return exact, "safetensors headers"
    found = gguf_bytes(folder)
    return found if found else (None, "")


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise UsageError(f"{path} is not a JSON object")
    return data


def _is_sub_config(key: str, value: Any) -> bool:
    """A nested model config (``text_config``, ``vision_config``...), which vLLM's overrides update in
    place; every other key, dict-valued ones like ``rope_scaling`` included, is replaced whole."""
    return isinstance(value, dict) and key.endswith("_config") and key != "quantization_config"


def apply_overrides(config: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """config.json with vLLM's ``--hf-overrides`` put over it, as vLLM 0.25 applies them."""
    out = dict(config)
    for key, value in overrides.items():
        if _is_sub_config(key, out.get(key)) and isinstance(value, Mapping):
            out[key] = apply_overrides(out[key], value)
        else:
            out[key] = value
    return out


def _spec(config: dict[str, Any], name: str, source: str, overrides: Mapping[str, Any] | None) -> ModelSpec:
    if overrides:
        config = apply_overrides(config, overrides)
        source = f"{source} with --hf-overrides {json.dumps(dict(overrides), sort_keys=True)}"
    return spec_from_config(config, name=name, source=source)


def resolve_model(model: str, overrides: Mapping[str, Any] | None = None) -> Resolved:
    """The model's spec; ``overrides`` (vLLM's --hf-overrides) are put over its config first."""
    if model in preset_names():
        config, meta = load_preset(model)
        spec = _spec(config, model, meta.get("source", ""), overrides)
        return Resolved(spec, meta, model_id=str(config.get("_name_or_path") or model))
    path = Path(model).expanduser()
    if path.is_file() and path.name == "config.json":
        path = path.parent  # a model's config.json is its folder: named by it, served from it
    if path.is_dir() and (path / "config.json").is_file():
        name = path.resolve().name
        spec = _spec(_read_json(path / "config.json"), name, str(path), overrides)
        return Resolved(spec, {}, *local_weights(path), model_id=str(path))
    if path.is_file():
        return Resolved(_spec(_read_json(path), path.stem, str(path), overrides))
    cached = hf_cache_config(model) if "/" in model else None
    if cached is not None:
        spec = _spec(_read_json(cached), model, f"HF cache {cached.parent}", overrides)
        return Resolved(spec, {}, *local_weights(cached.parent), model_id=model)
    raise UsageError(
        f"cannot find model {model!r}: not a preset, a local folder or config.json, or a model in the local HF cache"
        + meant(model, preset_names()),
        hint=f"presets: {', '.join(preset_names())}",
    )
