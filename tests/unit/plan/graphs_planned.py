"""The CUDA-graph deduction a plan makes for a model folder of benchmarks/gpu/models and a string of vLLM flags on
an H100, and a start log's own plan (shared by the runner and calibration tests)."""

from pathlib import Path
from typing import Any

from servelab.plan import (
    PlanRequest,
    compare_with,
    engine_request,
    gpu,
    make_plan,
    parse_engine_args,
    read_reported,
    resolve_model,
    with_engine_args,
)

MODELS = Path(__file__).resolve().parents[3] / "benchmarks/gpu/models"


def h100_request(card: str = "h100", context: int = 8192) -> PlanRequest:
    g = gpu(card)
    return PlanRequest(gpu_name=g.key, gpu_bytes=g.memory_bytes, bandwidth_gbs=None, context=context, concurrency=1,
                       quant=None, kv_dtype="auto", cuda_total_bytes=g.cuda_total_bytes)  # fmt: skip


def planned_from_log(log: Path, folder: Path, card: str) -> tuple[Any, Any, Any]:
    """(plan, what the log reported, the two side by side) for a start log planned from its model folder and the
    flags the log itself lists, nothing else, on ``card``."""
    reported = read_reported(str(log))
    request = engine_request(h100_request(card, context=32768), None, reported)
    assert request.engine_args is not None
    resolved = resolve_model(str(folder), request.engine_args.config_overrides())
    plan = make_plan(resolved, request)
    return plan, reported, compare_with(resolved, request, plan, reported)


def graphs_planned(folder: str, flags: str) -> int:
    """The deduction for ``flags`` (a ``VAR=value vllm serve`` prefix kept first), at an 8K context."""
    resolved = resolve_model(str(MODELS / folder))
    text = f"{flags} --max-model-len 8192" if "vllm serve" in flags else f"--max-model-len 8192 {flags}"
    plan = make_plan(resolved, with_engine_args(h100_request(), parse_engine_args(text)))
    return plan.overhead_parts["cudagraphs"]
