"""A config.json's values checked before any is used: a size that is zero, negative, fractional, absurd or not a
number, or a number that is not finite anywhere in the config, is a clear error naming the key, never a traceback
or a plan built on it (0 KV heads planned a model with no KV cache; 10^30 layers filled the memory)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

from servelab.core.errors import UsageError

# the sizes every walk reads, and the most any real model has (far above it: a broken or hostile file)
LIMITS = {
    "hidden_size": 1 << 20, "num_hidden_layers": 4096, "vocab_size": 1 << 24, "num_attention_heads": 1 << 14,
    "num_key_value_heads": 1 << 14, "num_kv_heads": 1 << 14, "head_dim": 1 << 14, "intermediate_size": 1 << 24,
    "moe_intermediate_size": 1 << 24, "max_position_embeddings": 1 << 34, "n_routed_experts": 1 << 16,
    "num_local_experts": 1 << 16, "num_experts": 1 << 16, "num_experts_per_tok": 1 << 16,
    "sliding_window": 1 << 34, "kv_lora_rank": 1 << 16, "qk_rope_head_dim": 1 << 14, "qk_nope_head_dim": 1 << 14,
    "v_head_dim": 1 << 14,
}  # fmt: skip
ZERO_ALLOWED = {"sliding_window", "n_routed_experts", "num_local_experts", "num_experts", "num_experts_per_tok",
                "moe_intermediate_size", "kv_lora_rank", "intermediate_size"}  # fmt: skip


def check_values(cfg: Mapping[str, Any], where: str = "config.json") -> None:
    """Raise :class:`UsageError` for the first value no model has (see the module docstring)."""
    for path, value in _numbers(cfg, ""):
        if isinstance(value, float) and not math.isfinite(value):
            raise UsageError(f"{where}: {path} is {value}, not a finite number")
    for key, limit in LIMITS.items():
        value = cfg.get(key)
        if value is None:
            continue
        least = 0 if key in ZERO_ALLOWED else 1
        whole = isinstance(value, int | float) and not isinstance(value, bool) and float(value).is_integer()
        if not whole or not least <= value <= limit:
            raise UsageError(f"{where}: {key} = {value!r} is not a whole number from {least} to {limit:,}")


def _numbers(value: Any, path: str, depth: int = 0) -> Iterator[tuple[str, Any]]:
    if depth > 32:
        raise UsageError(f"config.json nests deeper than 32 levels at {path or 'its top'}")
    if isinstance(value, Mapping):
        for key, inner in value.items():
            yield from _numbers(inner, f"{path}.{key}" if path else str(key), depth + 1)
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            yield from _numbers(inner, f"{path}[{i}]", depth + 1)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield path, value
