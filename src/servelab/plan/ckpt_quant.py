"""A checkpoint's own quantization, read from config.json's ``quantization_config``.

What each method stores, as vLLM 0.25 loads it:

- ``fp8``: E4M3 weights; with ``weight_block_size`` [n, k] one fp32 scale per block, else one per
  tensor. Every linear layer (attention, MLP, experts, recurrent projections) unless ignored.
- ``mxfp4`` (gpt-oss): only the MoE experts, FP4 with an E8M0 scale per 32; attention, routers,
  embeddings and lm_head stay 16-bit (vLLM has no MXFP4 linear or attention method).
- ``compressed-tensors``: per ``config_groups`` entry, ``num_bits`` with its ``strategy`` (tensor,
  channel, group of ``group_size``, block); NVFP4 groups of 16 carry FP8 scales; ``ignore`` kept.
- ``gptq`` / ``awq``: ``bits`` with an fp16 scale and a packed zero point per group.
- ``modelopt``: ``quant_algo`` FP8 (per tensor) or NVFP4 (FP8 scale per 16); ``exclude_modules`` kept.
- ``bitsandbytes``: NF4 (blocks of 64, fp32 absmax) or int8.

Ignore lists (``ignore``, ``ignored_layers``, ``modules_to_not_convert``, ``exclude_modules``) are
matched to parameter roles by module name; a name with a layer index keeps that layer's share.
A method servelab does not know fails closed, by name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from servelab.core.errors import UsageError

QUANTIZABLE = ("attention", "mlp_dense", "moe_routed", "moe_shared", "recurrent")
_ROLE_WORDS: tuple[tuple[str, str], ...] = (
    ("lm_head", "lm_head"),
    ("embed", "embedding"),
    ("router", "routers"),
    (r"mlp\.gate$", "routers"),
    (r"\.gate$", "routers"),
    ("shared_expert", "moe_shared"),
    ("expert", "moe_routed"),
    ("block_sparse_moe", "moe_routed"),
    ("mamba|mixer|linear_attn|in_proj|out_proj|x_proj|dt_proj", "recurrent"),
    ("self_attn|attention|attn|q_proj|k_proj|v_proj|o_proj|qkv|kv_a|kv_b|q_a|q_b", "attention"),
    ("mlp|gate_proj|up_proj|down_proj|feed_forward|ffn", "mlp_dense"),
)
_LAYER = re.compile(r"layers\.(\d+)\.")
# A pattern naming one projection keeps that projection's share of its block; other named leaves
# (per-head gates, norms, biases) are small and stay out of the count.
_LEAF_SHARE = {"q_proj": 0.25, "k_proj": 0.25, "v_proj": 0.25, "o_proj": 0.25, "qkv_proj": 0.75,
               "gate_proj": 1 / 3, "up_proj": 1 / 3, "down_proj": 1 / 3, "gate_up_proj": 2 / 3,
               "in_proj": 0.7, "out_proj": 0.3}  # fmt: skip
_BLOCKS = {"self_attn", "attn", "attention", "mlp", "experts", "shared_expert", "shared_experts", "mixer",
           "mamba", "linear_attn", "block_sparse_moe", "feed_forward", "lm_head", "embed_tokens", "router",
           "gate", "*", ""}  # fmt: skip


@dataclass(frozen=True, slots=True)
class QuantScheme:
    """Bytes per weight of the quantized roles; what stays 16-bit, and why."""

    name: str  # "fp8", "mxfp4", "int4", "nvfp4", ... (the --quant vocabulary)
    bytes_per_weight: float  # quantized weights, scales included
    roles: tuple[str, ...] = QUANTIZABLE  # which parameter roles the method quantizes
    kept: Mapping[str, float] = field(default_factory=dict)  # role -> share kept 16-bit (ignore lists)
    source: str = ""  # "config.json quantization_config (fp8, block 128x128)", "--quant fp8"

    def share_quantized(self, role: str) -> float:
        return 0.0 if role not in self.roles else 1.0 - min(1.0, self.kept.get(role, 0.0))


def _role(pattern: str) -> tuple[str, float] | None:
    """(role, share of the role's block) a module-name pattern keeps; None: nothing countable."""
    name = pattern.removeprefix("re:").lower().rstrip("$")
    leaf = re.split(r"[.\\]", name)[-1] if name else ""
    for words, role in _ROLE_WORDS:
        if re.search(words, name):
            if leaf in _BLOCKS or re.fullmatch(r"[\d*]+", leaf) or role in ("lm_head", "embedding", "routers"):
                return role, 1.0
            return (role, _LEAF_SHARE[leaf]) if leaf in _LEAF_SHARE else None
    return None


def kept_shares(patterns: list[str], num_layers: int) -> dict[str, float]:
    """Role -> the share of its parameters an ignore list keeps unquantized."""
    shares: dict[str, float] = {}
    per_layer: dict[tuple[str, float], set[int]] = {}
    for pattern in patterns:
        found = _role(str(pattern))
        if found is None:
            continue
        index = _LAYER.search(str(pattern))
        if index and num_layers:
            per_layer.setdefault(found, set()).add(int(index.group(1)))
        else:
            shares[found[0]] = min(1.0, shares.get(found[0], 0.0) + found[1])
    for (role, share), indices in per_layer.items():
        shares[role] = min(1.0, shares.get(role, 0.0) + share * len(indices) / num_layers)
    return shares


def _ignore_list(q: Mapping[str, Any]) -> list[str]:
    found: list[str] = []
    for key in ("ignore", "ignored_layers", "modules_to_not_convert", "exclude_modules", "ignored_modules"):
        value = q.get(key)
        if isinstance(value, list):
            found += [str(v) for v in value]
    return found


def _fp8(q: Mapping[str, Any]) -> tuple[str, float, str]:
    block = q.get("weight_block_size")
    if isinstance(block, list) and len(block) == 2 and all(isinstance(b, int) and b > 0 for b in block):
        return "fp8", 1.0 + 4 / (block[0] * block[1]), f"fp8, block {block[0]}x{block[1]}"
    return "fp8", 1.0, "fp8, per tensor"


def _group_bytes(bits: int, group: int, scale_bytes: float, zero: bool) -> float:
    per_group = scale_bytes + (bits / 8 if zero else 0.0)
    return bits / 8 + (per_group / group if group > 0 else 0.0)


def _whole(value: Any, what: str, least: int, most: int) -> int:
    """A quantization config's whole number within what any checkpoint has, else a clear refusal."""
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
        raise UsageError(f"config.json quantization_config: {what} = {value!r} is not a whole number from {least} "
                         f"to {most:,}")  # fmt: skip
    return value


def _int_group(q: Mapping[str, Any], method: str) -> tuple[str, float, str]:
    bits = _whole(q.get("bits") or q.get("w_bit") or 4, "bits", 1, 16)
    group = _whole(q.get("group_size") or q.get("q_group_size") or 128, "group_size", -1, 1 << 20)
    zero = bool(q.get("zero_point", True)) if method == "awq" else not bool(q.get("sym", True))
    name = {4: "int4", 8: "int8"}.get(bits, f"int{bits}")
    per_channel = "per channel" if group <= 0 else f"group {group}"
    return (
        name,
        _group_bytes(bits, group, 2.0, zero or method in ("gptq", "awq")),
        f"{method} {bits}-bit, {per_channel}",
    )


def _ct_group(weights: Mapping[str, Any]) -> tuple[str, float, str]:
    bits = _whole(weights.get("num_bits") or 8, "num_bits", 1, 16)
    kind = str(weights.get("type") or "int")
    strategy = str(weights.get("strategy") or "tensor")
    group = _whole(weights.get("group_size") or 0, "group_size", -1, 1 << 20)
    if kind == "float" and bits == 4:
        return "nvfp4", 0.5 + 1 / (group or 16), f"compressed-tensors nvfp4, group {group or 16}"
    if strategy == "block":
        block = weights.get("block_structure") or [128, 128]
        if not isinstance(block, list | tuple) or len(block) != 2:
            raise UsageError(f"config.json quantization_config: block_structure {block!r} is not two sizes")
        block = [_whole(b, "block_structure", 1, 1 << 20) for b in block]
        return f"{'fp' if kind == 'float' else 'int'}{bits}", bits / 8 + 4 / (block[0] * block[1]), \
            f"compressed-tensors {kind}{bits}, block {block[0]}x{block[1]}"  # fmt: skip
    if strategy == "group" and group > 0:
        zero = not bool(weights.get("symmetric", True))
        return f"int{bits}", _group_bytes(bits, group, 2.0, zero), f"compressed-tensors {kind}{bits}, group {group}"
    return f"{'fp' if kind == 'float' else 'int'}{bits}", bits / 8, f"compressed-tensors {kind}{bits}, {strategy}"


def _compressed_tensors(q: Mapping[str, Any]) -> tuple[str, float, str]:
    groups = q.get("config_groups") or {}
    weights = [
        g["weights"] for g in groups.values() if isinstance(g, Mapping) and isinstance(g.get("weights"), Mapping)
    ]
    if not weights:
        raise UsageError("compressed-tensors quantization_config has no config_groups with weights")
    # one scheme for all targets (the usual case); several: the widest, so memory is not under-planned
    return max((_ct_group(w) for w in weights), key=lambda item: item[1])


def _modelopt(q: Mapping[str, Any]) -> tuple[str, float, str]:
    algo = str(q.get("quant_algo") or (q.get("quantization") or {}).get("quant_algo") or "").upper()
    if algo == "FP8":
        return "fp8", 1.0, "modelopt FP8, per tensor"
    if algo == "NVFP4":
        group = _whole(q.get("group_size") or 16, "group_size", 1, 1 << 20)
        return "nvfp4", 0.5 + 1 / group, f"modelopt NVFP4, group {group}"
    raise UsageError(f"modelopt quant_algo {algo or '(none)'!r} is not one servelab models", hint="FP8 or NVFP4")


def _bitsandbytes(q: Mapping[str, Any]) -> tuple[str, float, str]:
    if q.get("load_in_8bit"):
        return "int8", 1.0, "bitsandbytes int8"
    return "nf4", 0.5 + 4 / 64, "bitsandbytes nf4, blocks of 64"


METHODS = {
    "fp8": _fp8,
    "fbgemm_fp8": lambda q: ("fp8", 1.0, "fbgemm fp8, per channel"),
    "gptq": lambda q: _int_group(q, "gptq"),
    "awq": lambda q: _int_group(q, "awq"),
    "compressed-tensors": _compressed_tensors,
    "modelopt": _modelopt,
    "modelopt_fp4": _modelopt,
    "bitsandbytes": _bitsandbytes,
}


def scheme_from_config(config: Mapping[str, Any], num_layers: int) -> QuantScheme | None:
    """The checkpoint's declared quantization, or None when config.json declares none."""
    q = config.get("quantization_config")
    if q is None:
        return None
    if not isinstance(q, Mapping):
        raise UsageError(f"config.json quantization_config is {type(q).__name__} {str(q)[:60]!r}, not an object: "
                         "servelab cannot tell how the weights are stored", hint="plan it with --quant")  # fmt: skip
    method = str(q.get("quant_method") or "").lower()
    if method == "mxfp4":
        return QuantScheme("mxfp4", 0.5 + 1 / 32, ("moe_routed",), kept_shares(_ignore_list(q), num_layers),
                           "config.json quantization_config (mxfp4: MoE experts only)")  # fmt: skip
    reader = METHODS.get(method)
    if reader is None:
        raise UsageError(
            f"config.json declares quantization {method or '(no quant_method)'!r}, which servelab does not model",
            hint=f"known: mxfp4, {', '.join(METHODS)}; or plan it with --quant and --weights",
        )
    name, per_weight, detail = reader(q)
    if not 0 < per_weight <= 4:  # no checkpoint stores a weight in more than fp32's four bytes
        raise UsageError(f"config.json quantization_config gives {per_weight:g} bytes a weight ({detail}): no "
                         "checkpoint stores weights so")  # fmt: skip
    kept = kept_shares(_ignore_list(q), num_layers)
    if method in ("gptq", "awq") and q.get("lm_head"):
        detail += ", lm_head quantized"
    return QuantScheme(name, per_weight, QUANTIZABLE, kept, f"config.json quantization_config ({detail})")
