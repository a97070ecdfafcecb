"""The CUDA-graph deduction a plan makes for a model folder of benchmarks/gpu/models and a string of vLLM flags on
an H100 (shared by the runner tests)."""

from pathlib import Path

from servelab.plan import PlanRequest, gpu, make_plan, parse_engine_args, resolve_model, with_engine_args

MODELS = Path(__file__).resolve().parents[3] / "benchmarks/gpu/models"


def h100_request(card: str = "h100") -> PlanRequest:
    g = gpu(card)
    return PlanRequest(gpu_name=g.key, gpu_bytes=g.memory_bytes, bandwidth_gbs=None, context=8192, concurrency=1,
                       quant=None, kv_dtype="auto", cuda_total_bytes=g.cuda_total_bytes)  # fmt: skip


def graphs_planned(folder: str, flags: str) -> int:
    """The deduction for ``flags`` (a ``VAR=value vllm serve`` prefix kept first), at an 8K context."""
    resolved = resolve_model(str(MODELS / folder))
    text = f"{flags} --max-model-len 8192" if "vllm serve" in flags else f"--max-model-len 8192 {flags}"
    plan = make_plan(resolved, with_engine_args(h100_request(), parse_engine_args(text)))
    return plan.overhead_parts["cudagraphs"]
