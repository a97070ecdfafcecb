"""config.json → :class:`ModelSpec`, for the architecture families servelab knows.

An architecture whose cache layout is not understood fails closed with
:class:`UnknownArchitecture` rather than producing a wrong number.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from servelab.core.errors import UsageError
from servelab.plan.ckpt_quant import scheme_from_config
from servelab.plan.families import FAMILIES
from servelab.plan.generic import inferred_note, unmodelled
from servelab.plan.spec import CacheLayer, ModelSpec, MoESpec, ParamBreakdown, UnknownArchitecture
from servelab.plan.state import RecurrentState
from servelab.plan.towers import unmodelled_parts
from servelab.plan.values import check_values

Config = Mapping[str, Any]

MLA_TYPES = {"deepseek_v2", "deepseek_v3", "kimi_k2", "deepseek_v32"}
GDN_TYPES = {"qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "qwen3_5", "qwen3_5_moe"}
STANDARD_TYPES = {
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen3",
    "qwen2_moe",
    "qwen3_moe",
    "gemma",
    "gemma2",
    "gemma3",
    "gemma3_text",
    "laguna",
    "phi3",
    "granite",
    "olmo2",
    "gpt_oss",
    "starcoder2",
    "cohere",
    "glm4_moe",
}
ATTENTION_KINDS = {"full_attention": "full", "sliding_attention": "sliding", "linear_attention": "linear"}


def text_config(config: Config) -> Config:
    """The language model's part of a config: ``text_config`` merged over the top level."""
    inner = config.get("text_config") or config.get("language_config")
    if isinstance(inner, Mapping):
        merged = {k: v for k, v in config.items() if k not in ("text_config", "vision_config")}
        merged.update(inner)
        return merged
    return config


def _model_type(config: Config) -> str:
    return str(config.get("model_type") or "").lower()


def _get(cfg: Config, *names: str, default: Any = None) -> Any:
    for name in names:
        if cfg.get(name) is not None:
            return cfg[name]
    return default


@dataclass(frozen=True, slots=True)
class _Heads:
    q: int
    kv: int
    head_dim: int
    head_dim_v: int


def _heads(cfg: Config, layer: int) -> _Heads:
    hidden = int(cfg["hidden_size"])
    per_layer = cfg.get("num_attention_heads_per_layer")
    q = int(per_layer[layer]) if per_layer else int(cfg["num_attention_heads"])
    kv = int(_get(cfg, "num_key_value_heads", "num_kv_heads", default=cfg["num_attention_heads"]))
    head_dim = int(_get(cfg, "head_dim", default=hidden // int(cfg["num_attention_heads"])))
    return _Heads(q, kv, head_dim, int(_get(cfg, "v_head_dim", default=head_dim)))


def query_head_counts(cfg: Config) -> tuple[int, ...]:
    """The layers' query-head counts that exceed every earlier layer's, in layer order (one count where the config
    has no per-layer list): a buffer sized by a layer's heads is cut from a freed larger one, and allocated anew only
    when a layer needs more than any before it."""
    heads = cfg.get("num_attention_heads_per_layer") or cfg.get("num_attention_heads")
    values = heads if isinstance(heads, list) else [heads]
    records: list[int] = []
    for h in values:
        if isinstance(h, int) and h > max(records, default=0):
            records.append(h)
    return tuple(records)


def layer_kinds(cfg: Config) -> list[str]:
    """Per-layer attention kind: full, sliding or linear."""
    n = int(cfg["num_hidden_layers"])
    declared = cfg.get("layer_types")
    if declared:
        if not isinstance(declared, list) or len(declared) != n:
            count = len(declared) if isinstance(declared, list) else type(declared).__name__
            raise UnknownArchitecture(f"layer_types lists {count} layers where num_hidden_layers is {n}: which "
                                      "layers are which cannot be told")  # fmt: skip
        kinds = []
        for i, name in enumerate(declared):
            if name not in ATTENTION_KINDS:
                raise UnknownArchitecture(
                    f"layer {i} has attention type {name!r}, whose cache servelab does not model yet"
                )
            kinds.append(ATTENTION_KINDS[name])
        return kinds
    mtype = _model_type(cfg)
    if cfg.get("full_attention_interval") and mtype in GDN_TYPES:
        every = int(cfg["full_attention_interval"])
        return ["full" if (i + 1) % every == 0 else "linear" for i in range(n)]
    if mtype in ("gemma3", "gemma3_text"):
        pattern = int(cfg.get("sliding_window_pattern", 6))
        return ["full" if (i + 1) % pattern == 0 else "sliding" for i in range(n)]
    if mtype == "gemma2":
        return ["sliding" if i % 2 == 0 else "full" for i in range(n)]
    if _uses_sliding_everywhere(cfg):
        return ["sliding"] * n
    return ["full"] * n


def _uses_sliding_everywhere(cfg: Config) -> bool:
    window = cfg.get("sliding_window")
    if not window:
        return False
    if "use_sliding_window" in cfg:
        on = bool(cfg["use_sliding_window"])
        windowed_from = cfg.get("max_window_layers")
        if on and isinstance(windowed_from, int) and 0 <= windowed_from < int(cfg["num_hidden_layers"]):
            # transformers' Qwen2 family: layers from max_window_layers on slide, the others not; vLLM 0.25.1
            # asserts against such a mix (models/qwen2.py, "Sliding window for some but all layers")
            raise UnknownArchitecture(
                f"sliding windows on layers {windowed_from} and up only (use_sliding_window with max_window_layers "
                f"{windowed_from} of {cfg['num_hidden_layers']}): vLLM 0.25.1 refuses to start such a model"
            )
        return on
    return _model_type(cfg) in ("mistral", "mixtral", "starcoder2")


def _cache_layer(cfg: Config, kind: str, index: int) -> CacheLayer:
    if _model_type(cfg) in MLA_TYPES:
        latent = int(cfg["kv_lora_rank"]) + int(cfg["qk_rope_head_dim"])
        return CacheLayer("mla", latent_dim=latent)
    if kind == "linear":
        return _gdn_layer(cfg)
    heads = _heads(cfg, index)
    window = int(cfg["sliding_window"]) if kind == "sliding" else None
    return CacheLayer(kind, heads.kv, heads.head_dim, heads.head_dim_v, window=window)  # type: ignore[arg-type]


def _gdn_dims(cfg: Config) -> tuple[int, int, int, int]:
    """(key_dim, value_dim, num_value_heads, conv kernel) of a gated-delta-net layer."""
    nk, nv = int(cfg["linear_num_key_heads"]), int(cfg["linear_num_value_heads"])
    dk, dv = int(cfg["linear_key_head_dim"]), int(cfg["linear_value_head_dim"])
    return nk * dk, nv * dv, nv, int(cfg.get("linear_conv_kernel_dim", 4))


def _gdn_layer(cfg: Config) -> CacheLayer:
    if _model_type(cfg) not in GDN_TYPES:
        raise UnknownArchitecture(f"linear-attention layers of {_model_type(cfg)!r} are not modelled yet")
    _, _, nv, kernel = _gdn_dims(cfg)
    state = RecurrentState(
        "gdn",
        kernel,
        num_heads=nv,
        head_dim=int(cfg["linear_value_head_dim"]),
        num_k_heads=int(cfg["linear_num_key_heads"]),
        head_k_dim=int(cfg["linear_key_head_dim"]),
        ssm_default=str(cfg.get("mamba_ssm_dtype") or "auto"),  # Qwen3.5's config update
    )
    return CacheLayer("linear", state=state)


# -- parameters ----------------------------------------------------------------------------------


def _attention_params(cfg: Config, kind: str, index: int) -> int:
    hidden = int(cfg["hidden_size"])
    if _model_type(cfg) in MLA_TYPES:
        return _mla_params(cfg)
    if kind == "linear":
        key_dim, value_dim, nv, kernel = _gdn_dims(cfg)
        conv_dim = 2 * key_dim + value_dim
        return hidden * (2 * key_dim + 2 * value_dim + 2 * nv) + conv_dim * kernel + value_dim * hidden
    h = _heads(cfg, index)
    q_out = h.q * h.head_dim
    if cfg.get("attn_output_gate"):
        q_out *= 2  # query and its output gate come from one projection
    gate = hidden * h.q if str(cfg.get("gating", "")).startswith("per") else 0
    return hidden * q_out + hidden * h.kv * (h.head_dim + h.head_dim_v) + h.q * h.head_dim_v * hidden + gate


def _mla_params(cfg: Config) -> int:
    hidden, nq = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    nope, rope, v = int(cfg["qk_nope_head_dim"]), int(cfg["qk_rope_head_dim"]), int(cfg["v_head_dim"])
    kv_rank, q_rank = int(cfg["kv_lora_rank"]), cfg.get("q_lora_rank")
    q = hidden * nq * (nope + rope) if not q_rank else hidden * q_rank + q_rank * nq * (nope + rope)
    kv = hidden * (kv_rank + rope) + kv_rank * nq * (nope + v)
    return q + kv + nq * v * hidden


def _moe_layout(cfg: Config) -> tuple[int, int, int, int, list[bool]] | None:
    """(experts, per token, expert size, shared size, which layers are MoE) or None for a dense model."""
    n = int(cfg["num_hidden_layers"])
    experts = _get(cfg, "n_routed_experts", "num_local_experts", "num_experts")
    if not experts:
        return None
    per_tok = int(_get(cfg, "num_experts_per_tok", "experts_per_token", "moe_topk"))
    size = int(_get(cfg, "moe_intermediate_size", "intermediate_size"))  # Mixtral and gpt-oss: one size for both
    shared = int(cfg.get("shared_expert_intermediate_size") or 0)
    if cfg.get("n_shared_experts"):
        shared = int(cfg["n_shared_experts"]) * size
    is_moe = [True] * n
    dense_first = int(cfg.get("first_k_dense_replace") or 0)
    dense_set = set(cfg.get("mlp_only_layers") or [])
    step = int(cfg.get("decoder_sparse_step") or 1)
    for i in range(n):
        if i < dense_first or i in dense_set or (i + 1) % step != 0:
            is_moe[i] = False
    return int(experts), per_tok, size, shared, is_moe


# families whose MLP is up -> activation -> down (two matrices), not gated (three): read in their model files
PLAIN_MLP_TYPES = {"starcoder2", "gpt_bigcode", "gpt_neox", "phi", "nemotron", "arcee", "apertus", "persimmon",
                   "falcon", "gpt2", "bloom", "mpt", "opt", "gptj", "codegen"}  # fmt: skip


def _gated_mlp(hidden: int, inner: int) -> int:
    return 3 * hidden * inner


def _dense_mlp(cfg: Config, hidden: int, inner: int) -> int:
    """A dense layer's MLP: gated (gate, up, down) unless the family's is plain, or its activation is squared ReLU
    (relu2: Nemotron's and Arcee's plain MLP)."""
    plain = _model_type(cfg) in PLAIN_MLP_TYPES or cfg.get("hidden_act") == "relu2"
    return 2 * hidden * inner if plain else _gated_mlp(hidden, inner)


def param_breakdown(cfg: Config, kinds: list[str]) -> tuple[ParamBreakdown, MoESpec | None]:
    hidden, vocab = int(cfg["hidden_size"]), int(cfg["vocab_size"])
    tied = bool(cfg.get("tie_word_embeddings", False))
    attention = sum(_attention_params(cfg, kind, i) for i, kind in enumerate(kinds))
    layout = _moe_layout(cfg)
    dense_inner = int(cfg.get("intermediate_size") or 0)
    if layout is None:
        mlp_dense, routed, shared_total, moe = _dense_mlp(cfg, hidden, dense_inner) * len(kinds), 0, 0, None
    else:
        experts, per_tok, size, shared, is_moe = layout
        moe_layers = sum(is_moe)
        expert = _gated_mlp(hidden, size)
        mlp_dense = _dense_mlp(cfg, hidden, dense_inner) * (len(kinds) - moe_layers)
        routed = experts * expert * moe_layers
        shared_per_layer = _gated_mlp(hidden, shared) + hidden * experts + (hidden if shared else 0)
        shared_total = shared_per_layer * moe_layers
        moe = MoESpec(experts, per_tok, expert, moe_layers, shared_per_layer)
    other = hidden * (2 * len(kinds) + 1)
    routers = moe.num_experts * hidden * moe.moe_layers if moe else 0
    return ParamBreakdown(
        embedding=vocab * hidden,
        lm_head=0 if tied else vocab * hidden,
        attention=attention,
        mlp_dense=mlp_dense,
        moe_routed=routed,
        moe_shared=shared_total,
        other=other,
        routers=routers,
    ), moe


NOPE_FAMILIES = {"jamba", "nemotron_h"}  # attention without rotary embeddings


def rope_cache_elements(cfg: Config) -> int:
    """Elements of vLLM's rotary cos/sin caches: ``get_rope`` keeps one per distinct RoPE setting, so a model whose
    sliding layers rotate otherwise (Laguna's ``swa_rope_parameters``, Gemma-3's ``rope_local_base_freq``, a
    per-layer-type ``rope_parameters``) keeps two. Each is the positions it precomputes x its rotary dimension:
    YaRN precomputes original x factor positions; linear and dynamic scaling max x factor; the rest the config's
    max_position_embeddings."""
    mtype = _model_type(cfg)
    if mtype in NOPE_FAMILIES or cfg.get("position_embedding_type") == "nope" or cfg.get("mla_use_nope"):
        return 0
    return sum(_rope_elements(cfg, rope) for rope in _rope_settings(cfg))


def _rope_settings(cfg: Config) -> list[Mapping[str, Any]]:
    """Each distinct RoPE setting the model's layers use."""
    rope = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    rope = rope if isinstance(rope, Mapping) else {}
    nested = {kind: sub for kind, sub in rope.items() if isinstance(sub, Mapping)}
    types = list(cfg.get("layer_types") or [])
    if nested:
        used = set(types or ["full_attention"])
        settings = [sub for kind, sub in nested.items() if kind in used] or list(nested.values())[:1]
    else:  # the base setting as get_rope keys it: its type and base (a top-level rope_theta) included
        theta = {"rope_theta": cfg["rope_theta"]} if cfg.get("rope_theta") is not None else {}
        settings = [{"rope_type": "default", **theta, **rope}]
    if "sliding_attention" in types and isinstance(cfg.get("swa_rope_parameters"), Mapping):
        settings.append(cfg["swa_rope_parameters"])  # Laguna: its sliding layers' own
    gemma3 = _model_type(cfg) in ("gemma3", "gemma3_text")
    if (cfg.get("rope_local_base_freq") or gemma3) and ("sliding_attention" in types or cfg.get("sliding_window")):
        local = cfg.get("rope_local_base_freq") or 10_000.0  # Gemma-3's local base (transformers' default)
        settings.append({"rope_type": "default", "rope_theta": local})
    distinct = {json.dumps(dict(s), sort_keys=True, default=str): s for s in settings}
    return list(distinct.values())


def _rope_elements(cfg: Config, rope: Mapping[str, Any]) -> int:
    positions = int(cfg.get("max_position_embeddings") or 0)
    kind = str(rope.get("rope_type") or rope.get("type") or "default")
    factor = float(rope.get("factor") or 1.0)
    if kind in ("yarn", "deepseek_yarn"):  # transformers fills a missing original length with the maximum
        positions = int(int(rope.get("original_max_position_embeddings") or positions) * factor)
    elif kind in ("linear", "dynamic"):
        positions = int(positions * factor)
    if _model_type(cfg) in MLA_TYPES or cfg.get("qk_rope_head_dim"):
        return positions * int(cfg.get("qk_rope_head_dim") or 0)
    heads = int(cfg.get("num_attention_heads") or 1)
    head_dim = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads)
    partial = rope.get("partial_rotary_factor") or cfg.get("partial_rotary_factor")
    return positions * int(head_dim * float(partial or 1.0))


def max_context(cfg: Mapping[str, Any]) -> int:
    """The longest ``--max-model-len`` vLLM accepts without an override: the positions the config states, scaled
    by a YaRN, dynamic or linear RoPE factor (from the original length, where given); 0 where none is stated."""
    base = next((int(cfg[k]) for k in ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length")
                 if isinstance(cfg.get(k), int) and cfg[k] > 0), 0)  # fmt: skip
    rope = cfg.get("rope_scaling") or {}
    kind = rope.get("rope_type") or rope.get("type") if isinstance(rope, dict) else None
    factor = rope.get("factor") if isinstance(rope, dict) else None
    if kind in ("yarn", "dynamic", "linear") and isinstance(factor, int | float) and factor > 1:
        original = rope.get("original_max_position_embeddings")
        return int((original if kind == "yarn" and isinstance(original, int) else base) * factor)
    return base


# a part of a multimodal checkpoint the plan does not model: its weights, vLLM's encoder cache budget and the
# profile run's multimodal peak would all be missing from a plan of the language model alone
def spec_from_config(config: Config, *, name: str = "", source: str = "") -> ModelSpec:
    """Build the spec; raises :class:`UnknownArchitecture` for layouts servelab cannot model, and for a
    checkpoint holding a part the plan does not model (a vision tower): refused, never planned without it."""
    if towers := unmodelled_parts(config):
        raise UnknownArchitecture(
            f"this checkpoint has a multimodal part servelab does not model ({', '.join(towers)}): the tower's "
            "weights, vLLM's encoder cache budget and the profile run's multimodal peak would be missing from the "
            "plan, so it is not planned",
            hint="plan its language model alone from a config.json of its text_config, knowing those are left out",
        )
    cfg = text_config(config)
    mtype = _model_type(cfg)
    known = STANDARD_TYPES | MLA_TYPES | GDN_TYPES | set(FAMILIES)
    inferred = mtype not in known
    if inferred and (not mtype or (blockers := unmodelled(cfg))):
        said = f": its config has {'; '.join(blockers)}" if mtype else ""
        raise UnknownArchitecture(
            f"architecture {mtype or '(no model_type)'!r} is not one servelab can model yet{said}",
            hint=f"known: {', '.join(sorted(known))}",
        )
    for key in ("hidden_size", "num_hidden_layers", "vocab_size"):
        if key not in cfg:
            raise UsageError(f"config.json has no {key!r}: is it a language model's config?")
    check_values(config)
    check_values(cfg)
    try:
        return _spec(config, cfg, mtype, inferred, name, source)
    except (KeyError, TypeError, ValueError, ArithmeticError, IndexError, AttributeError) as exc:
        raise UsageError(f"config.json of a {mtype!r} model is missing or has a bad value: {exc}") from None


def _spec(config: Config, cfg: Config, mtype: str, inferred: bool, name: str, source: str) -> ModelSpec:
    layers, params, moe = _layout(cfg, mtype)
    quantization = scheme_from_config(config, int(cfg["num_hidden_layers"])) or scheme_from_config(
        cfg, int(cfg["num_hidden_layers"])
    )
    archs = config.get("architectures")
    arch = str(archs[0]) if isinstance(archs, list) and archs else mtype
    return ModelSpec(
        name=name or str(cfg.get("_name_or_path") or arch),
        architecture=arch,
        model_type=mtype,
        hidden_size=int(cfg["hidden_size"]),
        vocab_size=int(cfg["vocab_size"]),
        max_position=max_context(cfg),
        layers=layers,
        params=params,
        moe=moe,
        config_quant=quantization.name if quantization else None,
        quantization=quantization,
        rope_cache_elements=rope_cache_elements(cfg),
        intermediate_size=int(cfg.get("intermediate_size") or 0),
        attention_q_heads=query_head_counts(cfg),
        mamba_chunk_size=int(cfg.get("mamba_chunk_size") or cfg.get("chunk_size") or 0),
        source=source,
        notes=(inferred_note(mtype),) if inferred else (),
    )


def _layout(cfg: Config, mtype: str) -> tuple[tuple[CacheLayer, ...], ParamBreakdown, MoESpec | None]:
    """The cache layers, parameters and MoE layout: a family's own walk, or the standard one."""
    if mtype in FAMILIES:
        family = FAMILIES[mtype](cfg)
        return family.layers, family.params, family.moe
    kinds = layer_kinds(cfg)
    params, moe = param_breakdown(cfg, kinds)
    return tuple(_cache_layer(cfg, kind, i) for i, kind in enumerate(kinds)), params, moe
