"""MODEL → config: a bundled preset, a local folder or config.json, or the local Hugging Face cache."""

from __future__ import annotations

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


def safetensors_bytes(folder: Path) -> int | None:
    """Exact tensor bytes from the safetensors headers in ``folder`` (no tensor data is read)."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for path in files:
        with path.open("rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length))
        for key, info in header.items():
            if key != "__metadata__":
                start, end = info["data_offsets"]
                total += end - start
    return total


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
    return sum(int(t.n_bytes) for f in files for t in GGUFReader(f).tensors), "GGUF tensor headers"


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
