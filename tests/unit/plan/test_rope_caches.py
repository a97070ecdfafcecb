"""vLLM's rotary caches: ``get_rope`` keeps one per distinct setting (rotary_embedding/__init__.py), so a model whose
sliding layers rotate otherwise keeps two. Laguna's H100 start (docs/data/h100-sweep-seed000-2026-12-06-s28) logged
54.35 GiB of weights; with its sliding layers' 1M-position cache (256 MiB) the plan gives 54.27 (54.02 before)."""

import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.plan.config import rope_cache_elements

MODELS = Path(__file__).resolve().parents[3] / "benchmarks/gpu/models"


def config(name: str) -> dict[str, Any]:
    return dict(json.loads((MODELS / name / "config.json").read_text()))


def test_laguna_keeps_a_yarn_cache_and_its_sliding_layers_own() -> None:
    # full layers: YaRN over 8,192 x 128 positions, half of 128 rotated; sliding: 1,048,576 positions x 128
    assert rope_cache_elements(config("laguna-s-2.1-120e")) == 1_048_576 * 64 + 1_048_576 * 128


def test_gemma3s_local_base_is_a_second_cache_of_the_same_size() -> None:
    cfg = config("gemma-3-27b-text")
    assert rope_cache_elements(cfg) == 2 * 131_072 * 128
    # without the key, transformers' default local base (10,000) is still not the global one (1,000,000)
    assert rope_cache_elements({k: v for k, v in cfg.items() if k != "rope_local_base_freq"}) == 2 * 131_072 * 128
    same = {**cfg, "rope_theta": 10_000.0}  # a local base equal to the global one: get_rope shares the cache
    assert rope_cache_elements({k: v for k, v in same.items() if k != "rope_local_base_freq"}) == 131_072 * 128


def test_yarn_without_an_original_length_scales_the_maximum() -> None:
    cfg = {"hidden_size": 1024, "num_attention_heads": 8, "max_position_embeddings": 32768,
           "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}  # fmt: skip
    assert rope_cache_elements(cfg) == 4 * 32768 * 128


def test_a_per_layer_type_rope_counts_the_types_the_layers_use() -> None:
    base = {"hidden_size": 1024, "num_attention_heads": 8, "max_position_embeddings": 4096}
    local = {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}
    nested = {"full_attention": {"rope_type": "default", "rope_theta": 1e6}, "sliding_attention": local}
    both = {**base, "rope_parameters": nested, "layer_types": ["sliding_attention", "full_attention"]}
    assert rope_cache_elements(both) == 4096 * 128 + 4096 * 64
    assert rope_cache_elements({**both, "layer_types": ["full_attention"] * 2}) == 4096 * 128


@settings(max_examples=60, deadline=None)
@given(theta=st.sampled_from([1e4, 1e6]), local=st.sampled_from([None, 1e4, 1e6]), sliding=st.booleans())
def test_one_cache_per_distinct_setting_never_twice(theta: float, local: float | None, sliding: bool) -> None:
    """A sliding setting equal to the full one is the same cache (get_rope's key); a distinct one adds one cache."""
    cfg: dict[str, Any] = {"hidden_size": 512, "num_attention_heads": 4, "max_position_embeddings": 2048,
                           "rope_parameters": {"rope_type": "default", "rope_theta": theta}}  # fmt: skip
    if sliding:
        cfg["layer_types"] = ["sliding_attention", "full_attention"]
    if local is not None:
        cfg["swa_rope_parameters"] = {"rope_type": "default", "rope_theta": local}
    caches = 1 + (sliding and local is not None and local != theta)
    assert rope_cache_elements(cfg) == caches * 2048 * 128
