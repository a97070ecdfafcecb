"""Families servelab does not list: a config that describes a plain decoder is planned from its keys (and said so),
anything else fails closed with the key that says why. Configs in the shape of real checkpoints' config.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from servelab.cli import main
from servelab.plan import UnknownArchitecture, spec_from_config


def _seed_oss() -> dict[str, Any]:
    """ByteDance Seed-OSS-36B's geometry (a Llama-like decoder under its own model_type)."""
    return {
        "model_type": "seed_oss", "architectures": ["SeedOssForCausalLM"], "hidden_size": 5120,
        "num_hidden_layers": 64, "num_attention_heads": 80, "num_key_value_heads": 8, "head_dim": 128,
        "intermediate_size": 27648, "vocab_size": 155136, "max_position_embeddings": 524288,
        "tie_word_embeddings": False, "attention_bias": True, "rope_theta": 1e7, "torch_dtype": "bfloat16",
    }  # fmt: skip


def test_an_unlisted_plain_decoder_is_planned_as_the_standard_walk_and_says_so() -> None:
    got = spec_from_config(_seed_oss())
    as_llama = spec_from_config({**_seed_oss(), "model_type": "llama"})
    assert got.layers == as_llama.layers and got.params == as_llama.params
    assert got.kv_bytes_per_token(2) == 64 * 8 * 128 * 2 * 2  # 256 KiB a token in bf16
    # hand count: attention q/o 5120x10240 each, k/v 5120x1024 each; gated MLP 3 x 5120 x 27648
    layer = 2 * 5120 * 10240 + 2 * 5120 * 1024 + 3 * 5120 * 27648
    assert got.total_params == 64 * layer + 2 * 155136 * 5120 + 5120 * (2 * 64 + 1)
    assert any("'seed_oss' is not a family servelab lists" in n for n in got.notes)


def test_an_unlisted_family_with_sliding_layers_declared_per_layer_is_planned() -> None:
    """OLMo-3's layout: three sliding-window layers then a full one, declared in layer_types."""
    cfg = {"model_type": "olmo3", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 32, "intermediate_size": 11008, "vocab_size": 100278, "sliding_window": 4096,
           "layer_types": (["sliding_attention"] * 3 + ["full_attention"]) * 8}  # fmt: skip
    got = spec_from_config(cfg)
    assert (got.count("full"), got.count("sliding")) == (8, 24)


def test_the_plan_of_an_unlisted_family_carries_the_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.json").write_text(json.dumps(_seed_oss()))
    assert main(["plan", str(tmp_path), "--gpu", "h200", "--context", "32768", "--concurrency", "8"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "'seed_oss' is not a family servelab lists" in out and "256.00 KiB" in out


_closed = [
    ({"mamba_d_state": 16, "mamba_d_conv": 4}, "mamba_d_state"),  # a hybrid with Mamba layers
    ({"linear_num_key_heads": 16, "linear_key_head_dim": 128}, "linear_num_key_heads"),
    ({"kv_lora_rank": 512, "qk_rope_head_dim": 64}, "kv_lora_rank"),  # latent attention
    ({"num_kv_shared_layers": 10}, "num_kv_shared_layers"),  # Gemma-3n: later layers reuse earlier KV
    ({"attention_chunk_size": 8192}, "attention_chunk_size"),
    ({"sliding_window": 4096}, "sliding_window"),  # which layers slide: not said
    ({"sliding_window_pattern": 4, "sliding_window": 4096}, "sliding_window_pattern"),
    ({"moe_num_experts": 64, "moe_k": 6}, "moe_num_experts"),  # ERNIE-4.5's expert keys: not the walk's
    ({"attn_type_list": [0, 0, 1]}, "attn_type_list"),  # MiniMax-01: lightning (linear) layers among full
    ({"num_key_value_heads": [8, 8, 0]}, "num_key_value_heads"),  # per-layer sizes
    ({"is_encoder_decoder": True}, "is_encoder_decoder"),
    ({"intermediate_size": None}, "intermediate_size"),  # no MLP size: a count of 0 would pass for one
    ({"multi_query": True}, "multi_query"),  # Falcon-7B: one KV head by a flag
]


@pytest.mark.parametrize(("extra", "key"), _closed, ids=[k for _, k in _closed])
def test_an_unlisted_family_with_anything_the_walk_does_not_model_fails_closed_by_key(
    extra: dict[str, Any], key: str
) -> None:
    with pytest.raises(UnknownArchitecture, match=f"'seed_oss'.*'{key}'"):
        spec_from_config({**_seed_oss(), **extra})


def test_keys_that_are_switched_off_or_only_route_do_not_close_it() -> None:
    cfg = {**_seed_oss(), "use_sliding_window": False, "sliding_window": 4096, "add_cross_attention": False,
           "num_local_experts": 8, "num_experts_per_tok": 2, "moe_routed_scaling_factor": 2.5,
           "router_aux_loss_coef": 0.01, "num_expert_group": 1}  # fmt: skip
    got = spec_from_config(cfg)
    assert got.moe is not None and got.moe.num_experts == 8
    assert got.count("sliding") == 0


def test_a_plain_mlp_family_counts_two_matrices_not_three() -> None:
    """StarCoder2-15B: c_fc and c_proj (no gate): 15.96B published; a gated count would say ~22B."""
    cfg = {"model_type": "starcoder2", "hidden_size": 6144, "num_hidden_layers": 40, "num_attention_heads": 48,
           "num_key_value_heads": 4, "intermediate_size": 24576, "vocab_size": 49152, "sliding_window": 4096,
           "tie_word_embeddings": True, "use_bias": True}  # fmt: skip
    got = spec_from_config(cfg)
    assert got.params.mlp_dense == 40 * 2 * 6144 * 24576
    assert got.total_params / 1e9 == pytest.approx(15.96, rel=0.02)
