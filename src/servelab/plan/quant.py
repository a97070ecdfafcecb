"""Bytes per weight for each quantization, and the weight footprint of a model."""

from __future__ import annotations

from dataclasses import dataclass

from servelab.core.errors import UsageError
from servelab.core.known_keys import meant
from servelab.plan.ckpt_quant import QUANTIZABLE, QuantScheme
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
    "q8_0": 34 / 32,  # llama.cpp cache types (-ctk / -ctv): bytes per element of their blocks of 32
    "q4_0": 18 / 32,
    "q4_1": 20 / 32,
    "q5_0": 22 / 32,
    "q5_1": 24 / 32,
    "iq4_nl": 18 / 32,
    "f16": 2.0,
    "f32": 4.0,
}


def quant(name: str) -> Quant:
    try:
        return QUANTS[name.lower()]
    except KeyError:
        said = f"unknown quantization {name!r}{meant(name, QUANTS)}"
        raise UsageError(said, hint=f"known: {', '.join(QUANTS)}") from None


def kv_dtype_bytes(name: str) -> float:
    try:
        return KV_DTYPES[name.lower()]
    except KeyError:
        said = f"unknown KV cache dtype {name!r}{meant(name, KV_DTYPES)}"
        raise UsageError(said, hint=f"known: {', '.join(KV_DTYPES)}") from None


@dataclass(frozen=True, slots=True)
class WeightEstimate:
    bytes: int
    method: str  # "checkpoint size (source)", "safetensors header", "estimate: ..."

    @property
    def gib(self) -> float:
        return self.bytes / GIB


def scheme_for(name: str) -> QuantScheme:
    """A ``--quant`` name as a scheme: every linear role in that format (bf16/fp16: none)."""
    q = quant(name)
    roles = () if q.bytes_per_weight >= 2.0 else QUANTIZABLE
    return QuantScheme(q.name, q.bytes_per_weight, roles, {}, f"--quant {q.name}: {q.note}")


VOCAB_PADDING = 64  # vLLM pads embedding and lm_head rows to a multiple of 64 per GPU


def padded_vocab(vocab: int, tp: int = 1) -> int:
    """The embedding / lm_head rows vLLM allocates in all: padded to 64 rows per GPU."""
    step = VOCAB_PADDING * tp
    return -(-vocab // step) * step


def role_params(spec: ModelSpec) -> dict[str, int]:
    p = spec.params
    return {
        "attention": p.attention,
        "mlp_dense": p.mlp_dense,
        "moe_routed": p.moe_routed,
        "moe_shared": p.moe_shared - p.routers,
        "recurrent": p.recurrent,
    }


def estimate_weights(
    spec: ModelSpec, scheme: QuantScheme | str, *, tp: int = 1, model_bytes: int = 2
) -> WeightEstimate:
    """Weight memory on one of ``tp`` GPUs as vLLM loads it: each role in the scheme's format where the
    scheme quantizes it, the rest (embeddings, lm_head, norms, routers, ignored modules) 16-bit; the
    vocabulary padded to vLLM's multiple; the rotary cos/sin cache it keeps beside the weights."""
    if isinstance(scheme, str):
        scheme = scheme_for(scheme)
    total = 0.0
    for role, count in role_params(spec).items():
        share = scheme.share_quantized(role)
        total += count * (share * scheme.bytes_per_weight + (1 - share) * model_bytes)
    p = spec.params
    vocab_rows = (padded_vocab(spec.vocab_size, tp) - spec.vocab_size) * spec.hidden_size
    embed = p.embedding + vocab_rows + (p.lm_head + vocab_rows if p.lm_head else 0)
    total += (embed + p.other + p.routers) * model_bytes
    total = total / tp + spec.rope_cache_elements * model_bytes
    kept = ", ".join(f"{role} {share:.0%}" for role, share in scheme.kept.items() if share) or "none"
    method = f"estimate: {scheme.source or scheme.name}; 16-bit: embeddings, lm_head, norms, routers"
    if scheme.kept:
        method += f"; kept 16-bit by the checkpoint: {kept}"
    return WeightEstimate(int(total), method)


def check_quantization(declared: QuantScheme | None, method: str | None) -> None:
    """vLLM's ``--quantization M``: a format the plan knows (fp8: vLLM quantizes online) is planned so; any other
    method needs a checkpoint quantized that way, so one that declares no quantization is refused rather than
    planned at 16 bits as if the flag were not there."""
    method = (method or "").lower()
    if not method or method in QUANTS or declared is not None:
        return
    raise UsageError(
        f"--quantization {method}: this checkpoint declares no quantization_config, so vLLM has no {method} weights "
        "to load, and servelab does not model it quantizing them online",
        hint="plan a checkpoint quantized that way (its config.json says so), or --quantization fp8 (online)",
    )
