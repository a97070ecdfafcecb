"""The planner's verdicts for the two seed articles, and its bad-input messages."""

import json
from pathlib import Path

import pytest

from servelab.cli import main
from servelab.plan import PlanRequest, gpu, make_plan, parse_size, resolve_model
from servelab.plan.calibrate import parse_log, reported_from_metrics
from servelab.plan.resolve import safetensors_bytes

GIB = 2**30


def request(**kw: object) -> PlanRequest:
    card = gpu(str(kw.pop("gpu", "h100-80gb")))
    base: dict[str, object] = dict(
        gpu_name=card.key,
        gpu_bytes=card.memory_bytes,
        bandwidth_gbs=card.bandwidth_gbs,
        context=131072,
        concurrency=1,
        quant="bf16",
        kv_dtype="auto",
    )
    base.update(kw)
    return PlanRequest(**base)  # type: ignore[arg-type]


def test_seed_003_laguna_int4_on_an_h100_holds_about_two_long_sessions() -> None:
    plan = make_plan(
        resolve_model("laguna-s-2.1"), request(quant="int4", kv_dtype="fp8", concurrency=2, gpu_memory_utilization=0.97)
    )
    assert 1.5 <= plan.capacity.max_sequences < 2.5
    assert plan.weights.method.startswith("checkpoint size")
    assert 5 * GIB < plan.kv_pool_bytes < 9 * GIB  # "~8 GB left for KV"


def test_seed_003_kv_per_token_decides_against_the_dense_hybrid() -> None:
    laguna = make_plan(
        resolve_model("laguna-s-2.1"), request(quant="int4", kv_dtype="fp8", gpu_memory_utilization=0.97)
    )
    qwen = make_plan(resolve_model("qwen3.6-27b"), request(quant="fp8", kv_dtype="fp8", gpu_memory_utilization=0.97))
    assert qwen.capacity.max_sequences > 4 * laguna.capacity.max_sequences


def test_seed_000_co_tenants_cap_gpu_memory_utilization() -> None:
    plan = make_plan(
        resolve_model("laguna-s-2.1"),
        request(
            gpu="rtx-pro-6000",
            quant="nvfp4",
            kv_dtype="fp8",
            context=65536,
            concurrency=3,
            alongside={"avatar": 3 * GIB, "tts": 7 * GIB},
            headroom=7 * GIB,
        ),
    )
    card = gpu("rtx-pro-6000").memory_bytes
    assert plan.util_max == pytest.approx(int((card - 17 * GIB) / card * 100) / 100)
    assert plan.fits and plan.util_min is not None and plan.util_min <= plan.util_max
    assert plan.capacity.max_sequences >= 3
    assert "--gpu-memory-utilization" in plan.command and "--kv-cache-dtype fp8" in plan.command


def test_too_big_is_refused_with_reasons() -> None:
    plan = make_plan(resolve_model("deepseek-v3"), request(quant="fp8"))
    assert not plan.fits and any("exceed" in r for r in plan.reasons)


def test_decode_ceiling_and_expert_coverage() -> None:
    plan = make_plan(resolve_model("laguna-s-2.1"), request(quant="int4", kv_dtype="fp8"))
    assert plan.decode.tok_s_short and plan.decode.tok_s_long and plan.decode.tok_s_short > plan.decode.tok_s_long
    touched = plan.decode.experts_touched
    assert touched[1] == pytest.approx(10) and touched[4] < 40 and touched[64] < 256


def test_sizes_parse() -> None:
    assert parse_size("96GiB") == 96 * GIB and parse_size("80GB") == 80 * 10**9 and parse_size("512MiB") == 2**29


def test_calibration_log_and_metrics_parsers() -> None:
    log = (
        "INFO [gpu_worker.py:538] Available KV cache memory: 13.14 GiB\n"
        "INFO [kv_cache_utils.py:2146] GPU KV cache size: 319,254 tokens\n"
        "INFO [kv_cache_utils.py:2147] Maximum concurrency for 32,768 tokens per request: 9.74x\n"
    )
    r = parse_log(log)
    assert (r.tokens, r.max_model_len, r.max_concurrency) == (319_254, 32_768, 9.74)
    m = reported_from_metrics('vllm:cache_config_info{block_size="128",num_gpu_blocks="728",x="y"} 1.0\n')
    assert (m.num_blocks, m.block_size) == (728, 128)


def test_safetensors_header_bytes(tmp_path: Path) -> None:
    header = json.dumps(
        {"a": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 12]}, "__metadata__": {"format": "pt"}}
    ).encode()
    (tmp_path / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 12)
    assert safetensors_bytes(tmp_path) == 12


def test_cli_json_and_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "plan",
            "laguna-s-2.1",
            "--gpu",
            "h100-80gb",
            "--quant",
            "int4",
            "--kv-dtype",
            "fp8",
            "--context",
            "128k",
            "--concurrency",
            "4",
            "--gpu-memory-utilization",
            "0.97",
            "--json",
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 3 and data["fits"] is False and data["capacity"]["max_sequences"] < 4


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["plan", "no-such-model"], "cannot find model"),
        (["plan", "llama-3.1-8b", "--gpu", "tpu-v9"], "unknown GPU"),
        (["plan", "llama-3.1-8b", "--alongside", "tts"], "NAME=SIZE"),
        (["plan", "llama-3.1-8b", "--gpu-mem", "lots"], "cannot read a size"),
        (["plan", "llama-3.1-8b", "--quant", "int3"], "unknown quantization"),
    ],
)
def test_bad_input_is_a_message_not_a_traceback(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_gguf_tensor_bytes_from_headers(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")  # installed by the embedded extra, as in `make test`
    import numpy as np

    from servelab.plan.resolve import local_weights

    writer = gguf.GGUFWriter(str(tmp_path / "m.gguf"), "llama")
    writer.add_tensor("a", np.zeros((4, 8), dtype=np.float32))
    writer.add_tensor("b", np.zeros((16,), dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert local_weights(tmp_path) == (4 * 8 * 4 + 16 * 2, "GGUF tensor headers")


def test_llamacpp_splits_the_context_across_slots_with_quantized_kv() -> None:
    plan = make_plan(
        resolve_model("llama-3.1-8b"),
        request(gpu="rtx-4090", engine="llamacpp", quant="gguf-q4_k_m", kv_dtype="q8_0", context=16384, concurrency=4),
    )
    per_token = 32 * 8 * (128 + 128) * 34 / 32  # q8_0: 34 bytes per 32 values
    assert plan.capacity.bytes_per_sequence == int(per_token * 16384)
    assert plan.capacity.tokens == 65536 and "-c 65536 -np 4" in plan.command and "-ctk q8_0" in plan.command


def test_sglang_fraction_is_of_the_memory_free_after_co_tenants() -> None:
    card = gpu("rtx-pro-6000")
    plan = make_plan(
        resolve_model("qwen3.6-35b-a3b"),
        request(
            gpu="rtx-pro-6000",
            engine="sglang",
            quant="fp8",
            kv_dtype="fp8",
            context=65536,
            concurrency=8,
            alongside={"tts": 7 * GIB},
        ),
    )
    free = card.memory_bytes - 7 * GIB
    assert plan.kv_pool_bytes == int(plan.util_chosen * free) - plan.weights.bytes
    assert "--mem-fraction-static" in plan.command and plan.fits


def test_the_headline_says_what_the_card_holds_at_the_chosen_and_at_the_most_allowed() -> None:
    """Llama-3.1-8B at 32K for one session: the lowest utilisation that holds it, and what the card holds at most."""
    plan = make_plan(resolve_model("llama-3.1-8b"), request(context=32768, concurrency=1))
    head, _, most = plan.verdict.partition(" (")
    assert (
        head.startswith("fits: holds 1.1 sessions of 32K")
        and f"at gpu_memory_utilization {plan.util_chosen:.2f}" in head
    )
    at_most = float(most.split(" at ")[0])
    assert at_most > 10 * 1.1 and f"at {plan.util_max:.2f}, the most this card allows" in most
    assert plan.command.startswith("vllm serve meta-llama/Llama-3.1-8B-Instruct ")  # the id vllm serve takes


def test_a_context_beyond_the_models_maximum_is_refused_unless_asked() -> None:
    from servelab.core.errors import UsageError

    with pytest.raises(UsageError, match=r"longer than llama-3.1-8b supports \(131,072 tokens\)"):
        make_plan(resolve_model("llama-3.1-8b"), request(context=262144))
    allowed = make_plan(resolve_model("llama-3.1-8b"), request(context=262144, allow_long_context=True))
    assert "--max-model-len 262144" in allowed.command
