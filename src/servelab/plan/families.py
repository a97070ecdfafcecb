"""Hybrid and recurrent families: which cache each decoder layer keeps, and the parameters it holds.

Layouts as vLLM 0.25's model files build them (``vllm/model_executor/models/<family>.py``):

- **Jamba** (Mamba-1 + attention + MoE): layer ``i`` is attention when ``i % attn_layer_period ==
  attn_layer_offset``, MoE when ``i % expert_layer_period == expert_layer_offset``.
- **Nemotron-H** (Mamba-2): ``hybrid_override_pattern``, one character per layer: ``M`` Mamba-2,
  ``*`` attention, ``-`` MLP only (no cache), ``E`` MoE only (no cache).
- **Granite-4.0-H** (Mamba-2 + MoE): ``layer_types`` (``mamba`` / ``attention``); every layer also
  has the MoE block and the shared MLP.
- **Falcon-H1**: attention and Mamba-2 side by side in every layer (two caches per layer).
- **Kimi-Linear**: KDA layers (``linear_attn_config.kda_layers``, 1-based) and MLA in the rest.
- **LFM2**: ``layer_types`` (``full_attention`` / ``conv``): attention with q/k norms, or a short convolution
  (``in_proj`` to 3 x ``conv_dim``, a depthwise conv of ``conv_L_cache``, ``out_proj``) keeping only its conv
  state; every layer a gated MLP whose size ``block_auto_adjust_ff_dim`` rescales (``lfm2.py``'s ``Lfm2MLP``).
- **Mamba-2** (Mamba-Codestral): every layer one Mamba-2 mixer and a norm, no attention and no MLP; the inner
  size is ``expand x hidden`` (``mamba2.py``).
- **Llama-4**: chunked local attention (``attention_chunk_size``) in the RoPE layers, global
  attention in the NoPE ones (``no_rope_layers[i] == 0``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from servelab.plan.spec import CacheLayer, MoESpec, ParamBreakdown, UnknownArchitecture
from servelab.plan.state import RecurrentState

Config = Mapping[str, Any]


@dataclass(slots=True)
class _Count:
    """Parameters by role while a family is walked layer by layer."""

    attention: int = 0
    mlp_dense: int = 0
    moe_routed: int = 0
    moe_shared: int = 0
    routers: int = 0
    recurrent: int = 0
    other: int = 0

    def breakdown(self, cfg: Config) -> ParamBreakdown:
        hidden, vocab = int(cfg["hidden_size"]), int(cfg["vocab_size"])
        tied = bool(cfg.get("tie_word_embeddings", False))
        return ParamBreakdown(
            embedding=vocab * hidden,
            lm_head=0 if tied else vocab * hidden,
            attention=self.attention,
            mlp_dense=self.mlp_dense,
            moe_routed=self.moe_routed,
            moe_shared=self.moe_shared + self.routers,
            other=self.other + hidden,  # + the final norm
            recurrent=self.recurrent,
            routers=self.routers,
        )


@dataclass(frozen=True, slots=True)
class Family:
    layers: tuple[CacheLayer, ...]
    params: ParamBreakdown
    moe: MoESpec | None


def _attention(cfg: Config, count: _Count, q: int, kv: int, head_dim: int, bias: bool = False) -> CacheLayer:
    hidden = int(cfg["hidden_size"])
    count.attention += hidden * (q + 2 * kv) * head_dim + q * head_dim * hidden
    count.attention += (q + 2 * kv) * head_dim if bias else 0
    return CacheLayer("full", kv, head_dim, head_dim)


def _mamba2(cfg: Config, count: _Count, *, inner: int, groups: int, state: int, heads: int, head_dim: int,
            kernel: int, ssm_default: str = "auto", norm: bool = True) -> CacheLayer:  # fmt: skip
    hidden = int(cfg["hidden_size"])
    conv_dim = inner + 2 * groups * state
    count.recurrent += hidden * (inner + conv_dim + heads) + inner * hidden  # in_proj, out_proj
    count.other += conv_dim * (kernel + 1) + 3 * heads + (inner if norm else 0)  # conv1d + bias, dt, A, D, norm
    shape = RecurrentState("mamba2", kernel, inner, groups, heads, head_dim, state, ssm_default=ssm_default)
    return CacheLayer("mamba", state=shape)


def _mamba1(cfg: Config, count: _Count) -> CacheLayer:
    hidden = int(cfg["hidden_size"])
    inner, state = int(cfg.get("mamba_expand", 2)) * hidden, int(cfg.get("mamba_d_state", 16))
    kernel, rank = int(cfg.get("mamba_d_conv", 4)), int(cfg.get("mamba_dt_rank") or -(-hidden // 16))
    count.recurrent += hidden * 2 * inner + inner * (rank + 2 * state) + rank * inner + inner * hidden
    count.other += (
        inner * kernel + inner + inner + inner * state + inner + rank + 2 * state
    )  # conv+bias, dt bias, A, D, norms
    return CacheLayer("mamba", state=RecurrentState("mamba1", kernel, inner, state_size=state))


def _gated(hidden: int, inner: int) -> int:
    return 3 * hidden * inner


def _moe(count: _Count, hidden: int, experts: int, expert: int, shared: int = 0) -> None:
    count.moe_routed += experts * expert
    count.moe_shared += shared
    count.routers += hidden * experts


def _moe_spec(experts: int, per_token: int, expert: int, layers: int, shared: int, hidden: int) -> MoESpec | None:
    if not experts or not layers:
        return None
    return MoESpec(experts, per_token, expert, layers, shared + hidden * experts)


def jamba(cfg: Config) -> Family:
    n, hidden = int(cfg["num_hidden_layers"]), int(cfg["hidden_size"])
    count, layers, moe_layers = _Count(), [], 0
    experts, inner = int(cfg.get("num_experts") or 0), int(cfg["intermediate_size"])
    q, kv = int(cfg["num_attention_heads"]), int(cfg.get("num_key_value_heads") or cfg["num_attention_heads"])
    for i in range(n):
        if i % int(cfg.get("attn_layer_period", 8)) == int(cfg.get("attn_layer_offset", 4)):
            layers.append(_attention(cfg, count, q, kv, hidden // q))
        else:
            layers.append(_mamba1(cfg, count))
        if experts > 1 and i % int(cfg.get("expert_layer_period", 2)) == int(cfg.get("expert_layer_offset", 1)):
            _moe(count, hidden, experts, _gated(hidden, inner))
            moe_layers += 1
        else:
            count.mlp_dense += _gated(hidden, inner)
        count.other += 2 * hidden
    per_tok = int(cfg.get("num_experts_per_tok") or 2)
    return Family(
        tuple(layers), count.breakdown(cfg), _moe_spec(experts, per_tok, _gated(hidden, inner), moe_layers, 0, hidden)
    )


def nemotron_h(cfg: Config) -> Family:
    hidden = int(cfg["hidden_size"])
    pattern = str(cfg.get("hybrid_override_pattern") or "")
    if len(pattern) != int(cfg["num_hidden_layers"]) or set(pattern) - set("M*-E"):
        raise UnknownArchitecture(f"nemotron_h hybrid_override_pattern {pattern!r} is not one servelab can read")
    count, layers = _Count(), []
    q, kv = int(cfg["num_attention_heads"]), int(cfg["num_key_value_heads"])
    head_dim = int(cfg.get("head_dim") or hidden // q)
    heads, mhead = int(cfg["mamba_num_heads"]), int(cfg["mamba_head_dim"])
    ssm_default = str(cfg.get("mamba_ssm_cache_dtype") or "float32")  # NemotronHForCausalLMConfig
    experts = int(cfg.get("n_routed_experts") or 0)
    moe_inner = int(cfg.get("moe_intermediate_size") or 0)
    shared = 2 * hidden * int(cfg.get("moe_shared_expert_intermediate_size") or 0)
    for char in pattern:
        count.other += hidden  # the block's norm
        if char == "M":
            layers.append(_mamba2(cfg, count, inner=heads * mhead, groups=int(cfg["n_groups"]),
                                  state=int(cfg["ssm_state_size"]), heads=heads, head_dim=mhead,
                                  kernel=int(cfg.get("conv_kernel", 4)), ssm_default=ssm_default))  # fmt: skip
        elif char == "*":
            layers.append(_attention(cfg, count, q, kv, head_dim, bool(cfg.get("attention_bias"))))
        elif char == "-":
            count.mlp_dense += 2 * hidden * int(cfg["intermediate_size"])  # up and down, relu2
        else:
            _moe(count, hidden, experts, 2 * hidden * moe_inner, shared)
    moe = _moe_spec(experts, int(cfg.get("num_experts_per_tok") or 1), 2 * hidden * moe_inner, pattern.count("E"),
                    shared, hidden)  # fmt: skip
    return Family(tuple(layers), count.breakdown(cfg), moe)


def granite_hybrid(cfg: Config) -> Family:
    hidden, n = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"])
    types = list(cfg.get("layer_types") or cfg.get("layers_block_type") or ["mamba"] * n)
    count, layers = _Count(), []
    q = int(cfg["num_attention_heads"])
    kv = int(cfg.get("num_key_value_heads") or q)
    experts, inner = int(cfg.get("num_local_experts") or 0), int(cfg.get("intermediate_size") or 0)
    shared = _gated(hidden, int(cfg.get("shared_intermediate_size") or 0))
    heads = int(cfg["mamba_n_heads"])
    for kind in types[:n]:
        count.other += 2 * hidden
        if kind in ("attention", "full_attention"):
            layers.append(_attention(cfg, count, q, kv, hidden // q, bool(cfg.get("attention_bias"))))
        else:
            layers.append(_mamba2(cfg, count, inner=int(cfg.get("mamba_expand", 2)) * hidden,
                                  groups=int(cfg.get("mamba_n_groups", 1)), state=int(cfg["mamba_d_state"]),
                                  heads=heads, head_dim=int(cfg["mamba_d_head"]),
                                  kernel=int(cfg.get("mamba_d_conv", 4))))  # fmt: skip
        if experts:
            _moe(count, hidden, experts, _gated(hidden, inner), shared)
        else:
            count.mlp_dense += shared
    moe = _moe_spec(experts, int(cfg.get("num_experts_per_tok") or 1), _gated(hidden, inner), n if experts else 0,
                    shared, hidden)  # fmt: skip
    return Family(tuple(layers), count.breakdown(cfg), moe)


def falcon_h1(cfg: Config) -> Family:
    hidden, n = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"])
    count, layers = _Count(), []
    q, kv = int(cfg["num_attention_heads"]), int(cfg["num_key_value_heads"])
    head_dim = int(cfg.get("head_dim") or hidden // q)
    inner = int(cfg.get("mamba_d_ssm") or int(cfg.get("mamba_expand", 2)) * hidden)
    for _ in range(n):
        layers.append(_attention(cfg, count, q, kv, head_dim, bool(cfg.get("attention_bias"))))
        layers.append(_mamba2(cfg, count, inner=inner, groups=int(cfg.get("mamba_n_groups", 1)),
                              state=int(cfg["mamba_d_state"]), heads=int(cfg["mamba_n_heads"]),
                              head_dim=int(cfg["mamba_d_head"]), kernel=int(cfg.get("mamba_d_conv", 4)),
                              norm=bool(cfg.get("mamba_rms_norm", False))))  # fmt: skip
        count.mlp_dense += _gated(hidden, int(cfg["intermediate_size"]))
        count.other += 2 * hidden
    return Family(tuple(layers), count.breakdown(cfg), None)


def _mla(cfg: Config, count: _Count) -> CacheLayer:
    hidden, nq = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    nope, rope, v = int(cfg["qk_nope_head_dim"]), int(cfg["qk_rope_head_dim"]), int(cfg["v_head_dim"])
    kv_rank, q_rank = int(cfg["kv_lora_rank"]), cfg.get("q_lora_rank")
    query = hidden * nq * (nope + rope) if not q_rank else hidden * q_rank + q_rank * nq * (nope + rope)
    count.attention += query + hidden * (kv_rank + rope) + kv_rank * nq * (nope + v) + nq * v * hidden
    count.other += kv_rank + (int(q_rank) if q_rank else 0)
    return CacheLayer("mla", latent_dim=kv_rank + rope)


def kimi_linear(cfg: Config) -> Family:
    hidden, n = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"])
    linear = cfg.get("linear_attn_config") or {}
    kda = set(linear.get("kda_layers") or [])
    heads, head_dim = int(linear.get("num_heads", 0)), int(linear.get("head_dim", 0))
    kernel = int(linear.get("short_conv_kernel_size", 4))
    count, layers = _Count(), []
    experts, moe_inner = int(cfg.get("num_experts") or 0), int(cfg.get("moe_intermediate_size") or 0)
    shared = _gated(hidden, moe_inner) * int(cfg.get("num_shared_experts") or 0)
    dense_first, moe_layers = int(cfg.get("first_k_dense_replace") or 0), 0
    width = heads * head_dim
    for i in range(n):
        count.other += 2 * hidden
        if i + 1 in kda:
            # q, k, v, f_a/f_b, g_a/g_b, b and o projections; q/k/v short convs, A, dt bias, o_norm
            count.recurrent += 3 * hidden * width + 2 * (hidden * head_dim + head_dim * width) + hidden * heads
            count.recurrent += width * hidden
            count.other += 3 * width * kernel + heads + width + head_dim
            layers.append(CacheLayer("linear", state=RecurrentState("kda", kernel, num_heads=heads, head_dim=head_dim)))
        else:
            layers.append(_mla(cfg, count))
        if experts and i >= dense_first and (i - dense_first) % int(cfg.get("moe_layer_freq") or 1) == 0:
            _moe(count, hidden, experts, _gated(hidden, moe_inner), shared)
            count.other += experts  # the router's score-correction bias
            moe_layers += 1
        else:
            count.mlp_dense += _gated(hidden, int(cfg["intermediate_size"]))
    moe = _moe_spec(experts, int(cfg.get("num_experts_per_token") or 1), _gated(hidden, moe_inner), moe_layers,
                    shared, hidden)  # fmt: skip
    return Family(tuple(layers), count.breakdown(cfg), moe)


def llama4(cfg: Config) -> Family:
    hidden, n = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"])
    count, layers = _Count(), []
    q, kv = int(cfg["num_attention_heads"]), int(cfg["num_key_value_heads"])
    head_dim = int(cfg.get("head_dim") or hidden // q)
    chunk = cfg.get("attention_chunk_size")
    no_rope = list(cfg.get("no_rope_layers") or [])
    experts, inner = int(cfg.get("num_local_experts") or 0), int(cfg["intermediate_size"])
    step, moe_layers = int(cfg.get("interleave_moe_layer_step") or 1), 0
    for i in range(n):
        layer = _attention(cfg, count, q, kv, head_dim, bool(cfg.get("attention_bias")))
        uses_rope = no_rope[i] != 0 if i < len(no_rope) else True
        layers.append(
            CacheLayer("chunked", kv, head_dim, head_dim, window=int(chunk)) if chunk and uses_rope else layer
        )
        if experts and (i + 1) % step == 0:
            _moe(count, hidden, experts, _gated(hidden, inner), _gated(hidden, inner))
            moe_layers += 1
        else:
            count.mlp_dense += _gated(hidden, int(cfg.get("intermediate_size_mlp") or inner))
        count.other += 2 * hidden
    moe = _moe_spec(experts, int(cfg.get("num_experts_per_tok") or 1), _gated(hidden, inner), moe_layers,
                    _gated(hidden, inner), hidden)  # fmt: skip
    return Family(tuple(layers), count.breakdown(cfg), moe)


def _lfm2_inner(cfg: Config) -> int:
    """Lfm2MLP's hidden size: 2/3 of intermediate_size, times the multiplier, up to a multiple, when auto-adjusted."""
    inner = int(cfg.get("block_ff_dim") or cfg["intermediate_size"])
    if cfg.get("block_auto_adjust_ff_dim"):
        inner = int(2 * inner / 3)
        if cfg.get("block_ffn_dim_multiplier") is not None:
            inner = int(float(cfg["block_ffn_dim_multiplier"]) * inner)
        step = int(cfg.get("block_multiple_of") or 1)
        inner = step * ((inner + step - 1) // step)
    return inner


def lfm2(cfg: Config) -> Family:
    hidden, n = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"])
    types = list(cfg.get("layer_types") or [])
    if len(types) < n or set(types[:n]) - {"full_attention", "conv"}:
        raise UnknownArchitecture(f"lfm2 layer_types {types!r} is not one servelab can read (full_attention / conv)")
    q, kv = int(cfg["num_attention_heads"]), int(cfg["num_key_value_heads"])
    conv_dim, kernel = int(cfg.get("conv_dim") or hidden), int(cfg.get("conv_L_cache") or 3)
    bias = bool(cfg.get("conv_bias"))
    count, layers, inner = _Count(), [], _lfm2_inner(cfg)
    for kind in types[:n]:
        count.other += 2 * hidden  # operator_norm, ffn_norm
        count.mlp_dense += _gated(hidden, inner)
        if kind == "full_attention":
            layers.append(_attention(cfg, count, q, kv, hidden // q))
            count.other += 2 * (hidden // q)  # q and k norms
        else:
            count.recurrent += hidden * 3 * conv_dim + conv_dim * hidden  # in_proj, out_proj
            count.other += conv_dim * kernel + (conv_dim * 5 if bias else 0)  # conv weight, the biases
            layers.append(CacheLayer("mamba", state=RecurrentState("shortconv", kernel, conv_dim)))
    tied = {**cfg, "tie_word_embeddings": cfg.get("tie_word_embeddings", cfg.get("tie_embedding", True))}
    return Family(tuple(layers), count.breakdown(tied), None)


def mamba2(cfg: Config) -> Family:
    hidden, n = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"])
    count, layers = _Count(), []
    for _ in range(n):
        count.other += hidden  # the block's norm
        layers.append(_mamba2(cfg, count, inner=int(cfg.get("expand", 2)) * hidden, groups=int(cfg.get("n_groups", 1)),
                              state=int(cfg["state_size"]), heads=int(cfg["num_heads"]), head_dim=int(cfg["head_dim"]),
                              kernel=int(cfg.get("conv_kernel", 4))))  # fmt: skip
    return Family(tuple(layers), count.breakdown(cfg), None)


FAMILIES: dict[str, Callable[[Config], Family]] = {
    "jamba": jamba,
    "nemotron_h": nemotron_h,
    "granitemoehybrid": granite_hybrid,
    "falcon_h1": falcon_h1,
    "kimi_linear": kimi_linear,
    "llama4": llama4,
    "llama4_text": llama4,
    "lfm2": lfm2,
    "mamba2": mamba2,
}
