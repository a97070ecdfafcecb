"""The families the planner refused or misread: LFM2 (short-convolution state beside attention) and pure Mamba-2
(no attention layer) modelled from vLLM's own model files, checked by hand; a multimodal checkpoint (a
``vision_config``) refused with what is not modelled, never planned as its language model alone."""

from __future__ import annotations

from typing import Any

import pytest

from servelab.cli import main
from servelab.plan import PlanRequest, UnknownArchitecture, make_plan, spec_from_config, vllm_layout
from servelab.plan.resolve import Resolved
from servelab.plan.vllm_rules import VllmOptions

GIB = 2**30
# LiquidAI/LFM2-350M's config.json (the keys the plan reads)
LFM2: dict[str, Any] = {
    "architectures": ["Lfm2ForCausalLM"], "model_type": "lfm2", "hidden_size": 1024, "num_hidden_layers": 16,
    "num_attention_heads": 16, "num_key_value_heads": 8, "intermediate_size": 6656, "block_ff_dim": 6656,
    "block_auto_adjust_ff_dim": True, "block_ffn_dim_multiplier": 1.0, "block_multiple_of": 256, "conv_L_cache": 3,
    "conv_bias": False, "conv_dim": 1024, "vocab_size": 65536, "tie_embedding": True,
    "max_position_embeddings": 128000, "rope_theta": 1000000.0,
    "layer_types": ["conv", "conv", "full_attention", "conv", "conv", "full_attention", "conv", "conv",
                    "full_attention", "conv", "full_attention", "conv", "full_attention", "conv", "full_attention",
                    "conv"],
}  # fmt: skip
# mistralai/Mamba-Codestral-7B-v0.1's config.json (the keys the plan reads)
CODESTRAL: dict[str, Any] = {
    "architectures": ["Mamba2ForCausalLM"], "model_type": "mamba2", "hidden_size": 4096, "num_hidden_layers": 64,
    "expand": 2, "n_groups": 8, "state_size": 128, "num_heads": 128, "head_dim": 64, "conv_kernel": 4,
    "vocab_size": 32768, "tie_word_embeddings": False, "chunk_size": 256, "use_conv_bias": True,
}  # fmt: skip


def _request(context: int, concurrency: int) -> PlanRequest:
    return PlanRequest(gpu_name="h100-80gb", gpu_bytes=80 * GIB, bandwidth_gbs=3350.0, context=context,
                       concurrency=concurrency, quant=None, kv_dtype="auto")  # fmt: skip


def test_lfm2_short_conv_state_beside_attention_by_hand() -> None:
    spec = spec_from_config(LFM2)
    assert spec.count("full") == 6 and spec.count("mamba") == 10
    assert spec.kv_bytes_per_token(2.0) == 6 * 8 * 64 * 2 * 2  # 6 attention layers, 8 KV heads of 64, K and V, bf16
    assert spec.state_bytes_per_sequence() == 10 * (3 - 1) * 1024 * 2  # conv_L_cache - 1 columns of conv_dim, bf16
    inner = 4608  # int(2 x 6656 / 3) = 4437, rounded up to a multiple of 256
    hand = (65536 * 1024 + 16 * 3 * 1024 * inner + 6 * (2 * 1024 * 1024 + 2 * 1024 * 512)
            + 10 * (4 * 1024 * 1024 + 1024 * 3))  # fmt: skip
    assert spec.total_params == pytest.approx(hand, rel=1e-3)  # the norms are the rest
    assert spec.total_params == pytest.approx(354e6, rel=0.01)  # "LFM2-350M": 354M parameters


def test_lfm2_plans_with_its_state_page_in_the_pool() -> None:
    spec = spec_from_config(LFM2)
    layout = vllm_layout(spec, VllmOptions(max_model_len=32768))
    kinds = {g.kind for g in layout.groups}
    assert kinds == {"full", "mamba"} and len({g.page_bytes for g in layout.groups}) == 1
    plan = make_plan(Resolved(spec), _request(32768, 4))
    assert plan.fits and plan.state_bytes_per_sequence == 40960


def test_pure_mamba2_with_no_attention_layer_by_hand() -> None:
    spec = spec_from_config(CODESTRAL)
    assert spec.count("mamba") == 64 and spec.kv_bytes_per_token(2.0) == 0
    conv = (4 - 1) * (8192 + 2 * 8 * 128)  # kernel - 1 columns of d_inner + 2 groups x d_state
    ssm = 128 * 64 * 128  # heads x head dim x d_state
    assert spec.state_bytes_per_sequence() == 64 * (conv + ssm) * 2
    assert spec.total_params == pytest.approx(7.2854e9, rel=0.01)  # the checkpoint's 7,285,403,648
    layout = vllm_layout(spec, VllmOptions(max_model_len=65536))
    assert layout.blocks_per_request == len(layout.groups)  # one state page a group, whatever the length
    plan = make_plan(Resolved(spec), _request(65536, 8))
    assert plan.fits and plan.capacity.bytes_per_sequence >= spec.state_bytes_per_sequence()


VL = {"model_type": "qwen2_5_vl", "architectures": ["Qwen2_5_VLForConditionalGeneration"], "hidden_size": 3584,
      "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4, "intermediate_size": 18944,
      "vocab_size": 152064, "vision_config": {"depth": 32, "hidden_size": 1280, "out_hidden_size": 3584}}  # fmt: skip


def test_a_multimodal_checkpoint_is_refused_naming_what_is_not_modelled(capsys: pytest.CaptureFixture[str],
                                                                        tmp_path: Any) -> None:  # fmt: skip
    with pytest.raises(UnknownArchitecture, match="vision_config") as caught:
        spec_from_config(VL)
    assert "encoder cache" in str(caught.value) and "weights" in str(caught.value)
    folder = tmp_path / "vl"
    folder.mkdir()
    (folder / "config.json").write_text(__import__("json").dumps(VL))
    assert main(["plan", str(folder), "--gpu", "h100-80gb"]) == 2
    err = capsys.readouterr().err
    assert "vision_config" in err and "Traceback" not in err
    text_only = {k: v for k, v in VL.items() if k != "vision_config"}
    # vLLM builds the VL class's tower from its architecture's defaults whatever the keys say: still refused
    with pytest.raises(UnknownArchitecture, match="architecture Qwen2_5_VLForConditionalGeneration"):
        spec_from_config(text_only)
    text_only |= {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"}
    assert spec_from_config(text_only).count("full") == 28  # its language model alone, when asked for that


@pytest.mark.parametrize("key", ["audio_config", "vision_tower", "speech_config"])
def test_other_towers_are_refused_too(key: str) -> None:
    with pytest.raises(UnknownArchitecture, match=key):
        spec_from_config({**{k: v for k, v in VL.items() if k != "vision_config"}, key: {"hidden_size": 8}})


# the VL checkpoint's language model as its own text config would give it
TEXT = {k: v for k, v in VL.items() if k != "vision_config"} | {"architectures": ["Qwen2ForCausalLM"],
                                                               "model_type": "qwen2"}  # fmt: skip


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"model_type": "phi3_v", "img_processor": {"name": "clip_vision_model"}, "embd_layer": {"x": 1}},
         "img_processor"),
        ({"model_type": "llava_llama", "mm_vision_tower": "openai/clip-vit-large", "mm_hidden_size": 1024},
         "mm_vision_tower"),
        ({"model_type": "phi4mm", "audio_processor": {"x": 1}, "vision_lora": {"r": 256}, "speech_lora": {"r": 320}},
         "audio_processor"),
        ({"architectures": ["SomeNewVisionForCausalLM"]}, "architecture SomeNewVisionForCausalLM"),
    ],
)  # fmt: skip
def test_towers_named_other_ways_are_refused_too(extra: dict[str, Any], named: str) -> None:
    """A tower is found by the words such parts are named with, not a list of known keys: Phi-3-vision's,
    LLaVA's and Phi-4-multimodal's were planned as text models when only vision_config was known."""
    text = dict(TEXT)
    with pytest.raises(UnknownArchitecture, match=named):
        spec_from_config(text | extra)


def test_layer_types_that_do_not_list_every_layer_are_refused() -> None:
    """16 kinds for 32 layers once planned a 4.5B model out of an 8B one."""
    text = dict(TEXT)
    layers = text["num_hidden_layers"]
    with pytest.raises(UnknownArchitecture, match=f"lists {layers // 2} layers where num_hidden_layers is {layers}"):
        spec_from_config(text | {"layer_types": ["full_attention"] * (layers // 2)})
    assert spec_from_config(text | {"layer_types": ["full_attention"] * layers}).count("full") == layers


def test_sliding_windows_on_some_qwen2_layers_only_are_refused_as_vllm_does() -> None:
    text = TEXT | {"sliding_window": 4096}
    layers = text["num_hidden_layers"]
    with pytest.raises(UnknownArchitecture, match=r"vLLM 0\.25\.1 refuses"):
        spec_from_config(text | {"use_sliding_window": True, "max_window_layers": layers // 2})
    assert spec_from_config(text | {"use_sliding_window": False, "max_window_layers": 4}).count("full") == layers


def test_a_text_key_that_only_contains_a_tower_word_is_no_tower() -> None:
    """OLMo's clip_qkv (clipping the attention's q, k and v) was refused as a CLIP tower: words are matched whole."""
    assert spec_from_config(TEXT | {"clip_qkv": 8.0}).count("full") == TEXT["num_hidden_layers"]
