"""A model's serving-relevant architecture, read from its config.json."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

LayerKind = Literal["full", "sliding", "mla", "linear", "mamba"]


@dataclass(frozen=True, slots=True)
class CacheLayer:
    """What one decoder layer keeps per token (attention) or per sequence (recurrent state)."""

    kind: LayerKind
    num_kv_heads: int = 0
    head_dim: int = 0
    head_dim_v: int = 0
    window: int | None = None  # sliding layers
    latent_dim: int = 0  # MLA: kv_lora_rank + qk_rope_head_dim, one "head"
    # recurrent layers: elements of state per sequence, by tensor
    conv_state: int = 0
    ssm_state: int = 0
    ssm_dtype_bytes: int | None = None  # None: the model dtype

    def kv_bytes_per_token(self, dtype_bytes: float) -> float:
        """Bytes one token adds to this layer's cache (0 for recurrent layers)."""
        if self.kind in ("full", "sliding"):
            return self.num_kv_heads * (self.head_dim + self.head_dim_v) * dtype_bytes
        if self.kind == "mla":
            return self.latent_dim * dtype_bytes
        return 0.0

    def state_bytes(self, model_dtype_bytes: int) -> int:
        """Constant per-sequence state of a recurrent layer."""
        ssm = self.ssm_dtype_bytes or model_dtype_bytes
        return self.conv_state * model_dtype_bytes + self.ssm_state * ssm


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
            if layer.kind == "sliding" and layer.window:
                if context is None:
                    continue
                per_token *= min(1.0, layer.window / context)
            total += per_token
        return total

    def state_bytes_per_sequence(self, model_dtype_bytes: int = 2) -> int:
        return sum(layer.state_bytes(model_dtype_bytes) for layer in self.layers if layer.kind in ("linear", "mamba"))
