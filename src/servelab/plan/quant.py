"""Bytes per weight for each quantization, and the weight footprint of a model."""

from __future__ import annotations

from dataclasses import dataclass

from servelab.core.errors import UsageError
from servelab.plan.spec import ModelSpec

GIB = 2**30


@dataclass(frozen=True, slots=True)
class Quant:
    name: str
    bytes_per_weight: float  # quantized tensors, scales included
    note: str


# Scales included: group-wise formats carry one scale (and maybe a zero point) per group.
QUANTS: dict[str, Quant] = {
    q.name: q
    for q in (
        Quant("bf16", 2.0, "16-bit weights"),
        Quant("fp16", 2.0, "16-bit weights"),
        Quant("fp8", 1.0 + 4 / (128 * 128), "FP8 E4M3, one fp32 scale per 128x128 block"),
        Quant("int8", 1.0 + 2 / 128, "INT8, fp16 scale per group of 128"),
        Quant("int4", 0.5 + 2 / 128 + 0.5 / 128, "INT4 group 128 (GPTQ/AWQ): fp16 scale and 4-bit zero per group"),
        Quant("nvfp4", 0.5 + 1 / 16, "NVFP4: FP4 E2M1 with an FP8 scale per 16 weights"),
        Quant("mxfp4", 0.5 + 1 / 32, "MXFP4: FP4 E2M1 with an E8M0 scale per 32 weights"),
        Quant("gguf-q8_0", 34 / 32, "GGUF Q8_0: 34 bytes per 32 weights"),
        Quant("gguf-q6_k", 210 / 256, "GGUF Q6_K: 210 bytes per 256 weights"),
        Quant("gguf-q5_k_m", 0.7068, "GGUF Q5_K_M: Q5_K (176 B/256) with Q6_K for attn_v/ffn_down halves, ~5.65 bits"),
        Quant("gguf-q4_k_m", 0.6062, "GGUF Q4_K_M: Q4_K (144 B/256) with Q6_K for attn_v/ffn_down halves, ~4.85 bits"),
        Quant("gguf-q4_0", 18 / 32, "GGUF Q4_0: 18 bytes per 32 weights"),
        Quant("gguf-q4_1", 20 / 32, "GGUF Q4_1: 20 bytes per 32 weights"),
    )
}

KV_DTYPES: dict[str, float] = {
    "bf16": 2.0,
    "fp16": 2.0,
    "auto": 2.0,
    "fp8": 1.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    "q8_0": 34 / 32,
    "q4_0": 18 / 32,  # llama.cpp cache types
}


def quant(name: str) -> Quant:
    try:
        return QUANTS[name.lower()]
    except KeyError:
        raise UsageError(f"unknown quantization {name!r}", hint=f"known: {', '.join(QUANTS)}") from None


def kv_dtype_bytes(name: str) -> float:
    try:
        return KV_DTYPES[name.lower()]
    except KeyError:
        raise UsageError(f"unknown KV cache dtype {name!r}", hint=f"known: {', '.join(KV_DTYPES)}") from None


@dataclass(frozen=True, slots=True)
class WeightEstimate:
    bytes: int
    method: str  # "checkpoint size (source)", "safetensors header", "estimate: ..."

    @property
    def gib(self) -> float:
        return self.bytes / GIB


def estimate_weights(spec: ModelSpec, quant_name: str) -> WeightEstimate:
    """Linear layers (attention, MLP, experts) in the quantization; embeddings, lm_head, norms and
    routers kept in 16 bits, as quantized checkpoints usually ship them."""
    q = quant(quant_name)
    p = spec.params
    routers = spec.moe.num_experts * spec.hidden_size * spec.moe.moe_layers if spec.moe else 0
    linear = p.attention + p.mlp_dense + p.moe_routed + p.moe_shared - routers
    kept = p.embedding + p.lm_head + p.other + routers
    total = linear * q.bytes_per_weight + kept * 2.0
    return WeightEstimate(int(total), f"estimate: {q.note}; embeddings, lm_head, norms, routers in 16 bits")
