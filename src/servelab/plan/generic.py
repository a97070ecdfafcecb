"""A decoder whose ``model_type`` servelab does not list, planned from its config when the config describes nothing
but what the standard walk models: attention layers (full, or sliding where ``layer_types`` or
``use_sliding_window`` says which), a gated MLP, and MoE blocks in the key forms the walk reads.

New families are mostly that (a renamed Llama, Qwen or Mixtral layout), and vLLM sizes their KV cache the same way.
Anything else in the config fails closed, by name: recurrent or linear-attention state, latent attention, KV shared
across layers, chunked or cross attention, per-layer block configs, an undeclared sliding-window pattern, or an
expert key the walk does not read. The plan says the layout was inferred.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Config = Mapping[str, Any]

# a key containing one of these names a cache or layer kind the standard walk does not model
UNMODELLED = {
    "mamba": "Mamba state",
    "ssm": "state-space layers",
    "linear_attn": "linear attention",
    "linear_num": "linear attention",
    "conv_kernel": "convolution state",
    "conv_l_cache": "convolution state",
    "conv_bias": "convolution state",
    "rwkv": "RWKV state",
    "time_step": "state-space layers",
    "state_size": "recurrent state",
    "hybrid": "a hybrid layer pattern",
    "block_type": "a per-layer block pattern",
    "block_configs": "per-layer block configs",
    "kv_lora_rank": "latent attention (MLA)",
    "q_lora_rank": "latent attention (MLA)",
    "attention_chunk_size": "chunked local attention",
    "kv_shared": "KV shared across layers",
    "shared_kv": "KV shared across layers",
    "cross_attention": "cross-attention",
    "sliding_window_pattern": "a sliding-window pattern",
    "global_attn": "a global/local attention pattern",
    "local_attn": "a global/local attention pattern",
    "attn_type": "a per-layer attention-type list",
    "multi_query": "multi-query attention by a flag",
    "parallel_attn": "attention and MLP in parallel",
    "altup": "per-layer inputs",
    "laurel": "per-layer inputs",
}
# the expert keys the standard walk reads (config.py's _moe_layout), and those that change no memory
EXPERT_KEYS = {
    "n_routed_experts", "num_local_experts", "num_experts", "num_experts_per_tok", "experts_per_token",
    "moe_topk", "moe_intermediate_size", "shared_expert_intermediate_size", "n_shared_experts",
    "first_k_dense_replace", "mlp_only_layers", "decoder_sparse_step",
}  # fmt: skip
# routing and training settings, no memory: an expert key naming one of these is not a layout
EXPERT_HARMLESS = ("scaling_factor", "aux_loss", "activation", "renorm", "norm_topk", "jitter", "z_loss", "balance",
                   "capacity_factor", "group", "score", "bias_update", "router_dtype")  # fmt: skip
PER_LAYER_LISTS = ("num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size", "hidden_size")


def unmodelled(cfg: Config) -> list[str]:
    """What in this config the standard walk would get wrong, each with the key that says so; empty when the
    config describes a plain decoder."""
    found: dict[str, str] = {}
    for key, value in cfg.items():
        name = key.lower()
        if value in (None, False, 0, [], {}, ""):
            continue  # declared off: a "use_mamba": false, an empty pattern
        for marker, what in UNMODELLED.items():
            if marker in name:
                found.setdefault(what, key)
        expert_key = "expert" in name or name.startswith("moe")
        if expert_key and name not in EXPERT_KEYS and not any(h in name for h in EXPERT_HARMLESS):
            found.setdefault("an expert layout the walk does not read", key)
    mtype = str(cfg.get("model_type") or "").lower()
    for marker, what in UNMODELLED.items():
        if marker in mtype:
            found.setdefault(what, "model_type")
    if not cfg.get("num_attention_heads"):
        found.setdefault("no attention heads", "num_attention_heads")
    if not cfg.get("intermediate_size") and not cfg.get("moe_intermediate_size"):
        found.setdefault("no MLP size", "intermediate_size")
    for key in PER_LAYER_LISTS:
        if isinstance(cfg.get(key), list):
            found.setdefault("per-layer sizes", key)
    if cfg.get("sliding_window") and not cfg.get("layer_types") and "use_sliding_window" not in cfg:
        found.setdefault("a sliding window without saying which layers use it", "sliding_window")
    if cfg.get("is_encoder_decoder"):
        found.setdefault("an encoder-decoder", "is_encoder_decoder")
    return [f"{what} ('{key}')" for what, key in found.items()]


def inferred_note(model_type: str) -> str:
    return (
        f"{model_type!r} is not a family servelab lists: planned as a standard decoder from its config.json "
        "(attention heads, MLP and expert sizes); its weights are an estimate unless the checkpoint's files are given"
    )
