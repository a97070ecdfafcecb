"""Hand-computed cache layouts for the recurrent and hybrid families, checked against what vLLM 0.25.1 logged
for the same configs on an H200 (docs/data/h200-capacity-2026-12-01: block sizes, padding, KV cache size)."""

from pathlib import Path

import pytest

from servelab.plan import resolve_model
from servelab.plan.spec import ModelSpec
from servelab.plan.state import RecurrentState
from servelab.plan.vllm_rules import VllmOptions, vllm_layout

MODELS = Path(__file__).resolve().parents[3] / "benchmarks" / "gpu" / "models"
GIB = 2**30


def spec(name: str) -> ModelSpec:
    return resolve_model(str(MODELS / name)).spec


def logged_range(layout, gib: float) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """vLLM logs its KV memory rounded to 0.01 GiB: the tokens that range allows."""
    return layout.capacity_tokens(int((gib - 0.005) * GIB)), layout.capacity_tokens(int((gib + 0.005) * GIB))


def test_jamba_mamba1_state_block_and_groups() -> None:
    s = spec("jamba-mini-1.7")
    assert (s.count("full"), s.count("mamba")) == (4, 28)  # attention at i % 8 == 4
    # Mamba-1: conv (4-1) x d_inner 8192, SSM d_inner x d_state 16, both bf16
    assert s.layers[0].state_bytes(2) == (3 * 8192 + 8192 * 16) * 2 == 311_296
    layout = vllm_layout(s, VllmOptions(max_model_len=32768))
    # attention page per token: 8 KV heads x 128 x (K+V) x 2 B = 4096; 16 x ceil(311,296 / (16 x 4096)) = 80
    assert layout.groups[0].block_size == 80  # vLLM: "Setting attention block size to 80 tokens"
    assert layout.groups[0].page_bytes == 80 * 4096  # the state padded by 5.26%, as vLLM logged
    # group size 4 (the attention count): one attention group, seven Mamba groups
    assert [g.kind for g in layout.groups].count("mamba") == 7
    assert layout.blocks_per_request == 410 + 7  # cdiv(32768, 80) + one state page per Mamba group
    low, high = logged_range(layout, 30.00)
    assert low <= 1_931_111 <= high  # vLLM: "GPU KV cache size: 1,931,111 tokens"


def test_nemotron_h_forces_an_fp32_ssm_state_and_the_flag_overrides_it() -> None:
    s = spec("nemotron-nano-9b-v2")
    assert (s.count("mamba"), s.count("full")) == (27, 4)  # 'M' and '*' of hybrid_override_pattern; '-' holds none
    conv = 3 * (128 * 80 + 2 * 8 * 128)  # (kernel-1) x (d_inner + 2 groups x d_state)
    ssm = 128 * 80 * 128  # heads x head_dim x d_state
    assert s.layers[0].state_bytes(2) == conv * 2 + ssm * 4  # NemotronH: fp32 unless asked
    assert s.layers[0].state_bytes(2, ssm_dtype="bfloat16") == (conv + ssm) * 2
    fp32 = vllm_layout(s, VllmOptions(max_model_len=32768))
    bf16 = vllm_layout(s, VllmOptions(max_model_len=32768, mamba_ssm_cache_dtype="bfloat16"))
    assert (fp32.groups[0].block_size, bf16.groups[0].block_size) == (1312, 672)  # both as vLLM logged
    low, high = logged_range(fp32, 109.88)
    assert low <= 5_619_712 <= high


def test_mamba2_state_under_tensor_parallelism() -> None:
    one_group = RecurrentState("mamba2", 4, intermediate=4096, n_groups=1, num_heads=64, head_dim=64, state_size=128)
    conv, ssm = one_group.elements(tp=2)
    # a single group is replicated to follow the heads: groups become 2, then split
    assert conv == 3 * (4096 + 2 * 2 * 128) // 2 and ssm == 32 * 64 * 128
    eight = RecurrentState("mamba2", 4, intermediate=4096, n_groups=8, num_heads=64, head_dim=64, state_size=128)
    assert eight.elements(tp=2) == (3 * (4096 + 2 * 8 * 128) // 2, 32 * 64 * 128)


def test_granite_4_h_layer_types_and_moe() -> None:
    s = spec("granite-4.0-h-tiny")
    assert (s.count("full"), s.count("mamba")) == (4, 36)
    state = (3 * (3072 + 2 * 128) + 48 * 64 * 128) * 2
    assert s.layers[0].state_bytes(2) == state
    layout = vllm_layout(s, VllmOptions(max_model_len=32768))
    # 4 KV heads x 128 x 2 x 2 B = 2048 B per token: 16 x ceil(state / (16 x 2048)) tokens
    assert layout.groups[0].block_size == 16 * -(-state // (16 * 2048)) == 400
    assert s.moe is not None and (s.moe.num_experts, s.moe.experts_per_token) == (64, 6)


def test_falcon_h1_keeps_attention_and_mamba_in_every_layer() -> None:
    s = spec("falcon-h1-7b")
    assert (s.count("full"), s.count("mamba")) == (44, 44)
    state = (3 * (3072 + 2 * 256) + 24 * 128 * 256) * 2
    layout = vllm_layout(s, VllmOptions(max_model_len=32768))
    assert layout.groups[0].block_size == 1568  # vLLM: "Setting attention block size to 1568 tokens"
    assert layout.groups[0].page_bytes == 1568 * 1024 and 1568 * 1024 / state - 1 == pytest.approx(0.0071, abs=1e-4)
    assert len(layout.groups) == 2 and layout.bytes_per_block == 44 * 1568 * 1024


def test_kimi_linear_kda_state_is_fp32_whatever_is_asked() -> None:
    s = spec("kimi-linear-48b-a3b")
    assert (s.count("linear"), s.count("mla")) == (20, 7)
    conv, recurrent = 3 * 3 * 32 * 128, 32 * 128 * 128
    assert s.layers[0].state_bytes(2) == conv * 2 + recurrent * 4
    assert s.layers[0].state_bytes(2, ssm_dtype="bfloat16") == conv * 2 + recurrent * 4
    layout = vllm_layout(s, VllmOptions(max_model_len=32768))
    assert layout.groups[0].block_size == 1888  # MLA page 576 x 2 B per token
    # 7 MLA layers set the group size; 20 KDA layers make 3 groups, one padded
    assert sorted(g.layers for g in layout.groups if g.kind == "linear") == [6, 7, 7]
    low, high = logged_range(layout, 6.31)
    assert low <= 694_369 <= high


def test_llama4_chunked_local_attention_holds_a_chunk_plus_a_step() -> None:
    s = spec("llama-4-scout-16l")
    assert (s.count("chunked"), s.count("full")) == (12, 4)  # NoPE every 4th layer is global
    layout = vllm_layout(s, VllmOptions(max_model_len=32768))
    chunked = [g for g in layout.groups if g.kind == "chunked"]
    assert len(chunked) == 3 and chunked[0].blocks_per_request == (8192 + 8192) // 16
    assert layout.blocks_per_request == 2048 + 3 * 1024
    low, high = logged_range(layout, 53.11)
    assert low <= 1_392_128 <= high
    # --disable-hybrid-kv-cache-manager: every layer a full one, 1.6x fewer tokens
    flat = vllm_layout(s, VllmOptions(max_model_len=32768, hybrid_kv_cache_manager=False))
    assert len(flat.groups) == 1 and flat.blocks_per_request == 2048
    assert layout.capacity_tokens(GIB) / flat.capacity_tokens(GIB) == pytest.approx(1.6, rel=0.01)


def test_mamba_prefix_caching_keeps_more_states_per_request() -> None:
    s = spec("nemotron-nano-9b-v2")
    align = vllm_layout(s, VllmOptions(max_model_len=32768, mamba_cache_mode="align"))
    assert all(g.blocks_per_request == 2 for g in align.groups if g.kind == "mamba")
    every = vllm_layout(s, VllmOptions(max_model_len=32768, mamba_cache_mode="all"))
    block = every.groups[0].block_size
    assert block % 128 == 0  # a whole number of the Mamba-2 chunk (chunk_size 128)
    assert all(g.blocks_per_request == -(-32768 // block) for g in every.groups if g.kind == "mamba")
