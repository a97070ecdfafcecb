"""``servelab plan list``: each bundled preset with what a person picks it by (its parameters, architecture,
context and the checkpoint's own quantization, read from its config the way a plan reads it), and the GPUs known."""

from __future__ import annotations

from dataclasses import dataclass

from servelab.plan.gpus import GPU, GPUS
from servelab.plan.resolve import preset_names, resolve_model
from servelab.plan.spec import ModelSpec


@dataclass(frozen=True, slots=True)
class PresetInfo:
    name: str
    architecture: str  # the config's model_type, with its layer kinds and experts where it has them
    total_params: int
    active_params: int
    max_context: int  # 0: the config does not say
    quantization: str  # the checkpoint's own, else "16-bit"


def presets() -> list[PresetInfo]:
    return [_info(name, resolve_model(name).spec) for name in preset_names()]


def gpus() -> list[GPU]:
    return list(GPUS.values())


def _info(name: str, spec: ModelSpec) -> PresetInfo:
    quant = spec.quantization.name if spec.quantization else (spec.config_quant or "16-bit")
    return PresetInfo(name, describe(spec), spec.total_params, spec.active_params, spec.max_position, quant)


def describe(spec: ModelSpec) -> str:
    """``llama: 32 full``, ``laguna: 12 full + 36 sliding, MoE 10 of 256`` (the config's model_type, its layers)."""
    kinds: dict[str, int] = {}
    for layer in spec.layers:
        kinds[layer.kind] = kinds.get(layer.kind, 0) + 1
    layers = " + ".join(f"{n} {kind}" for kind, n in kinds.items())
    moe = f", MoE {spec.moe.experts_per_token} of {spec.moe.num_experts}" if spec.moe else ""
    return f"{spec.model_type}: {layers}{moe}"
