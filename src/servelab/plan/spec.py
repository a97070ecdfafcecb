"""A model's serving-relevant architecture, read from its config.json."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from servelab.core.errors import UsageError
from servelab.plan.ckpt_quant import QuantScheme
from servelab.plan.state import RecurrentState

LayerKind = Literal["full", "sliding", "chunked", "mla", "linear", "mamba"]
RECURRENT: tuple[LayerKind, ...] = ("linear", "mamba")


class UnknownArchitecture(UsageError):
    """servelab does not know this architecture's cache layout: no number beats a wrong number."""


@dataclass(frozen=True, slots=True)
class CacheLayer:
    """What one decoder layer keeps per token (attention) or per sequence (recurrent state)."""

    kind: LayerKind
    num_kv_heads: int = 0
    head_dim: int = 0
    head_dim_v: int = 0
    window: int | None = None  # sliding layers: the window; chunked local attention: the chunk
    latent_dim: int = 0  # MLA: kv_lora_rank + qk_rope_head_dim, one "head"
    state: RecurrentState | None = None  # recurrent layers (mamba, linear attention)

    def kv_heads(self, tp: int = 1) -> int:
        """KV heads on one of ``tp`` GPUs: split, or replicated once there are fewer heads than GPUs."""
        return max(1, self.num_kv_heads // tp)

    def kv_bytes_per_token(self, dtype_bytes: float, tp: int = 1) -> float:
        """Bytes one token adds to this layer's cache on one GPU (0 for recurrent layers)."""
        if self.kind in ("full", "sliding", "chunked"):
            return self.kv_heads(tp) * (self.head_dim + self.head_dim_v) * dtype_bytes
        if self.kind == "mla":
            return self.latent_dim * dtype_bytes
        return 0.0

    def state_bytes(self, model_dtype_bytes: int = 2, *, conv_dtype: str = "auto", ssm_dtype: str = "auto",
                    tp: int = 1) -> int:  # fmt: skip
        """Constant per-sequence state of a recurrent layer on one GPU (0 for attention)."""
        if self.state is None:
            return 0
        return self.state.nbytes(model_dtype_bytes, conv_dtype=conv_dtype, ssm_dtype=ssm_dtype, tp=tp)


@dataclass(frozen=True, slots=True)
class MoESpec:
    num_experts: int
    experts_per_token: int
    expert_params: int  # one routed expert, one layer
    moe_layers: int
    shared_params_per_layer: int = 0

    @property
    def routed_params(self) -> int:
        return self.num_experts * self.expert_params * self.moe_layers

    @property
    def inactive_params(self) -> int:
        return (self.num_experts - self.experts_per_token) * self.expert_params * self.moe_layers


@dataclass(frozen=True, slots=True)
class ParamBreakdown:
    embedding: int
    lm_head: int
    attention: int
    mlp_dense: int
    moe_routed: int
    moe_shared: int  # shared experts and routers
    other: int  # norms and small vectors
    recurrent: int = 0  # projections of mamba / linear-attention mixers (quantized like attention)
    routers: int = 0  # the MoE routers' share of moe_shared (kept 16-bit by quantized checkpoints)

    @property
    def total(self) -> int:
        return (
            self.embedding
            + self.lm_head
            + self.attention
            + self.mlp_dense
            + self.moe_routed
            + self.moe_shared
            + self.other
            + self.recurrent
        )


@dataclass(frozen=True, slots=True)
class ModelSpec:
    name: str
    architecture: str
    model_type: str
    hidden_size: int
    vocab_size: int
    max_position: int
    layers: tuple[CacheLayer, ...]
    params: ParamBreakdown
    moe: MoESpec | None = None
    config_quant: str | None = None  # from quantization_config, when the checkpoint says
    mamba_chunk_size: int = 0  # the Mamba-2 chunk (vLLM aligns blocks to it with Mamba prefix caching)
    quantization: QuantScheme | None = None  # the checkpoint's own, from quantization_config
    rope_cache_elements: int = 0  # vLLM's cos/sin cache: positions x rotary dim, in the model dtype
    intermediate_size: int = 0  # the dense MLP's (activation model)
    attention_q_heads: tuple[int, ...] = ()  # query-head counts past every earlier layer's (CUDA-graph workspace)
    source: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def total_params(self) -> int:
        return self.params.total

    @property
    def active_params(self) -> int:
        return self.total_params - (self.moe.inactive_params if self.moe else 0)

    def count(self, kind: LayerKind) -> int:
        return sum(1 for layer in self.layers if layer.kind == kind)

    def kv_bytes_per_token(self, dtype_bytes: float, *, context: int | None = None) -> float:
        """Average KV bytes per token over a sequence of ``context`` tokens.

        Full and MLA layers grow with every token; sliding layers stop at their window;
        recurrent layers add none (see :meth:`state_bytes_per_sequence`). Without a context,
        the per-token cost of the growing layers alone (the long-context limit).
        """
        total = 0.0
        for layer in self.layers:
            per_token = layer.kv_bytes_per_token(dtype_bytes)
            if layer.kind in ("sliding", "chunked") and layer.window:
                if context is None:
                    continue
                per_token *= min(1.0, layer.window / context)
            total += per_token
        return total

    def state_bytes_per_sequence(self, model_dtype_bytes: int = 2, *, ssm_dtype: str = "auto", tp: int = 1) -> int:
        return sum(layer.state_bytes(model_dtype_bytes, ssm_dtype=ssm_dtype, tp=tp) for layer in self.layers)
