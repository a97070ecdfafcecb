"""Weights from a checkpoint's own quantization_config, by hand; --quant overrides it and says so."""

from pathlib import Path
from typing import Any

import pytest

from servelab.core.errors import UsageError
from servelab.plan import PlanRequest, make_plan, resolve_model, spec_from_config
from servelab.plan.ckpt_quant import kept_shares, scheme_from_config
from servelab.plan.quant import estimate_weights, role_params
from servelab.plan.resolve import load_preset

MODELS = Path(__file__).resolve().parents[3] / "benchmarks" / "gpu" / "models"
GIB = 2**30


def llama70b(quantization: dict[str, Any] | None) -> Any:
    config, _ = load_preset("llama-3.1-70b")
    if quantization:
        config["quantization_config"] = quantization
    return spec_from_config(config)


def sixteen_bit_rest(s: Any) -> float:
    """Embeddings (vocab padded to 64), lm_head, norms, routers and the rotary cache, 2 bytes each."""
    p = s.params
    pad = (-(-s.vocab_size // 64) * 64 - s.vocab_size) * s.hidden_size
    return (p.embedding + p.lm_head + 2 * pad + p.other + p.routers + s.rope_cache_elements) * 2


def test_an_fp8_llama_70b_is_planned_at_its_own_size() -> None:
    s = llama70b({"quant_method": "fp8", "activation_scheme": "dynamic"})
    linear = sum(role_params(s).values())
    assert estimate_weights(s, s.quantization).bytes == int(linear * 1.0 + sixteen_bit_rest(s))
    assert estimate_weights(s, s.quantization).bytes / GIB == pytest.approx(67.7, abs=0.1)  # not 131 GiB
    assert estimate_weights(s, "bf16").bytes / GIB == pytest.approx(131.4, abs=0.1)


def test_block_fp8_carries_one_fp32_scale_per_128x128_block_and_matches_vllm() -> None:
    s = resolve_model(str(MODELS / "llama-3.1-8b-fp8-block")).spec
    assert s.quantization is not None and s.quantization.bytes_per_weight == 1 + 4 / (128 * 128)
    linear = sum(role_params(s).values())
    expected = linear * (1 + 4 / 16384) + sixteen_bit_rest(s)
    assert estimate_weights(s, s.quantization).bytes == int(expected)
    assert expected / GIB == pytest.approx(8.51, abs=0.05)  # vLLM 0.25.1: "Model loading took 8.51 GiB"


def test_mxfp4_quantizes_only_the_experts() -> None:
    s = resolve_model(str(MODELS / "gpt-oss-20b")).spec
    roles = role_params(s)
    expected = (
        roles["moe_routed"] * (0.5 + 1 / 32) + (roles["attention"] + roles["moe_shared"]) * 2 + sixteen_bit_rest(s)
    )
    assert estimate_weights(s, s.quantization).bytes == int(expected)
    assert s.quantization is not None and s.quantization.kept["attention"] == 1.0  # modules_to_not_convert
    assert expected / GIB == pytest.approx(12.82, abs=0.01)  # vLLM loaded 13.02 GiB (triton_kernels layout)


@pytest.mark.parametrize(
    ("quantization", "per_weight", "name"),
    [
        ({"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True}, 0.5 + (2 + 0.5) / 128, "int4"),
        ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}, 0.5 + (2 + 0.5) / 128, "int4"),
        ({"quant_method": "gptq", "bits": 8, "group_size": -1}, 1.0, "int8"),
        ({"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}, 0.5 + 1 / 16, "nvfp4"),
        ({"quant_method": "modelopt", "quant_algo": "FP8"}, 1.0, "fp8"),
        (
            {"quant_method": "compressed-tensors", "config_groups": {"g": {"targets": ["Linear"], "weights": {
                "num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": True}}}},
            0.5 + 2 / 128,
            "int4",
        ),
        (
            {"quant_method": "compressed-tensors", "config_groups": {"g": {"targets": ["Linear"], "weights": {
                "num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16}}}},
            0.5 + 1 / 16,
            "nvfp4",
        ),
        (
            {"quant_method": "compressed-tensors", "config_groups": {"g": {"targets": ["Linear"], "weights": {
                "num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]}}}},
            1 + 4 / 16384,
            "fp8",
        ),
    ],
)  # fmt: skip
def test_each_method_stores_what_it_says(quantization: dict[str, Any], per_weight: float, name: str) -> None:
    scheme = scheme_from_config({"quantization_config": quantization}, 80)
    assert scheme is not None and (scheme.name, scheme.bytes_per_weight) == (name, pytest.approx(per_weight))


def test_ignore_lists_keep_their_modules_16_bit() -> None:
    # whole blocks, one projection of every layer, one layer's MLP, and leaves too small to count
    shares = kept_shares(["lm_head", "re:.*self_attn.o_proj$", "model.layers.0.mlp", "model.layers.3.self_attn.g_proj"],
                         num_layers=4)  # fmt: skip
    assert shares == {"lm_head": 1.0, "attention": 0.25, "mlp_dense": 0.25}
    s = llama70b({"quant_method": "fp8", "ignored_layers": ["model.layers.0.mlp"]})
    plain = llama70b({"quant_method": "fp8"})
    mlp_layer = s.params.mlp_dense / 80  # one layer's MLP: 2 bytes a weight instead of 1
    extra = estimate_weights(s, s.quantization).bytes - estimate_weights(plain, plain.quantization).bytes
    assert abs(extra - mlp_layer) <= 2


def test_an_unknown_method_fails_closed_by_name() -> None:
    with pytest.raises(UsageError, match="hqq"):
        scheme_from_config({"quantization_config": {"quant_method": "hqq"}}, 4)


def test_quant_overrides_the_checkpoint_and_the_plan_says_what_it_read() -> None:
    resolved = resolve_model(str(MODELS / "llama-3.1-8b-fp8-block"))
    base = dict(gpu_name="h200", gpu_bytes=140 * GIB, bandwidth_gbs=None, context=8192, concurrency=1,
                kv_dtype="auto")  # fmt: skip
    own = make_plan(resolved, PlanRequest(quant=None, **base))  # type: ignore[arg-type]
    assert own.weights.bytes / GIB == pytest.approx(8.49, abs=0.01)
    assert any("weights read from config.json quantization_config (fp8, block 128x128)" in n for n in own.notes)
    bf16 = make_plan(resolved, PlanRequest(quant="bf16", **base))  # type: ignore[arg-type]
    assert bf16.weights.bytes / GIB == pytest.approx(14.99, abs=0.01)
    assert any(n.startswith("--quant bf16 overrides the checkpoint's own") for n in bf16.notes)
