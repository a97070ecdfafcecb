"""The planner's KV capacity against what the embedded vLLM itself logged and exposes."""

from __future__ import annotations

from pathlib import Path

from servelab.engines.embedded import EngineState
from servelab.plan import PlanRequest, make_plan, resolve_model
from servelab.plan.budget import compare_with
from servelab.plan.calibrate import read_reported

GIB = 2**30


def _request() -> PlanRequest:
    return PlanRequest(
        gpu_name="cpu",
        gpu_bytes=24 * GIB,
        bandwidth_gbs=None,
        context=8192,
        concurrency=1,
        quant="bf16",
        kv_dtype="auto",
        engine="vllm-cpu",
        block_size=128,
        kv_pool_bytes=2 * GIB,
    )


def test_predicted_capacity_equals_the_engine_log_within_one_block(engine: EngineState) -> None:
    resolved = resolve_model("smollm2-135m")
    plan = make_plan(resolved, _request())
    reported = read_reported(engine.log)
    assert reported.tokens is not None
    assert abs(plan.capacity.tokens - reported.tokens) <= 128, (plan.capacity.tokens, reported.tokens)
    comparison = compare_with(resolved, _request(), plan, reported)
    assert comparison.rules_error_blocks is not None and abs(comparison.rules_error_blocks) <= 1


def test_metrics_blocks_agree_with_the_plan(engine: EngineState) -> None:
    resolved = resolve_model("smollm2-135m")
    plan = make_plan(resolved, _request())
    reported = read_reported(engine.url)
    assert reported.block_size == 128 and reported.num_blocks is not None
    assert abs(reported.num_blocks * 128 - plan.capacity.tokens) <= 128
    assert Path(engine.log).is_file()
