"""The plan for exactly the flags a point starts the engine with, to set beside what the engine then logged.

The request is built from the point's whole command (servelab's base words and the point's flags, through plan's own
flag reader), with the engine's defaults for every flag not given: vLLM's ``--max-model-len`` is the model's own
maximum, its CPU build's KV pool is ``VLLM_CPU_KVCACHE_SPACE`` GiB in 128-token blocks on the host's memory; llama.cpp's
``-c`` is split over ``-np`` slots (absent: planned as its automatic 4), and with no ``-c`` (or ``-c 0``) each slot
holds the model's whole context (llama-server 0.3.36 logged ``n_ctx = 16384`` for ``-np 2`` on SmolLM2's 8,192: its
pool is slots x the model's context, docs/sweep.md). A plan
that cannot be made is said as the point's plan error, never a crash of the sweep.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field, replace

from servelab.core.errors import ServelabError
from servelab.core.results.sweep import PointPlan
from servelab.plan import (
    GIB,
    PlanRequest,
    Resolved,
    gpu,
    parse_engine_args,
    plan_model,
    resolve_model,
    with_engine_args,
)


@dataclass(frozen=True, slots=True)
class Where:
    """What the plan is for: a GPU by its key, else this host's memory (the CPU builds); the co-tenants' memory."""

    gpu: str | None = None
    alongside: dict[str, int] = field(default_factory=dict)
    headroom: int = 0


def host_memory() -> int:
    return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


RUNNER_ENV = ("VLLM_USE_V2_MODEL_RUNNER", "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "TORCH_COMPILE_DISABLE")


def plan_point(engine: str, model_config: str, args: tuple[str, ...], env: dict[str, str], where: Where) -> PointPlan:
    """The plan of one point, or why there is none."""
    try:
        resolved = resolve_model(model_config)
        request = _request(engine, resolved, args, env, where)
        request, plan = plan_model(resolved, request)
    except (ServelabError, ValueError, KeyError) as exc:
        return PointPlan(error=str(exc))
    return PointPlan(fits=plan.fits, verdict=plan.verdict, kv_tokens=plan.capacity.tokens,
                     kv_pool_bytes=plan.kv_pool_bytes, weights_bytes=plan.weights.bytes,
                     max_sequences=plan.capacity.max_sequences, context=request.context,
                     command=plan.command)  # fmt: skip


def _base(engine: str, resolved: Resolved, where: Where) -> PlanRequest:
    card = gpu(where.gpu) if where.gpu else None
    plan_engine = engine if card or engine != "vllm" else "vllm-cpu"
    return PlanRequest(
        gpu_name=card.key if card else "this host (CPU)",
        gpu_bytes=card.memory_bytes if card else host_memory(),
        bandwidth_gbs=card.bandwidth_gbs if card else None,
        context=resolved.spec.max_position or 0,
        concurrency=1,
        quant=None,
        kv_dtype="auto",
        engine=plan_engine,
        alongside=where.alongside,
        headroom=where.headroom,
        block_size=128 if plan_engine == "vllm-cpu" else 16,
        cuda_total_bytes=card.cuda_total_bytes if card else None,
    )


def _request(engine: str, resolved: Resolved, args: tuple[str, ...], env: dict[str, str], where: Where) -> PlanRequest:
    req = _base(engine, resolved, where)
    if engine == "llamacpp":  # plan's own reading of llama-server's flags (plan/llamacpp_args.py)
        return with_engine_args(req, parse_engine_args(shlex.join(args), "llamacpp"))
    if req.engine == "vllm-cpu" and "VLLM_CPU_KVCACHE_SPACE" in env:
        req = replace(req, kv_pool_bytes=int(env["VLLM_CPU_KVCACHE_SPACE"]) * GIB)
    # the environment that changes vLLM's model runner or its CUDA-graph deduction, as if set before `vllm serve`
    runner_env = [f"{k}={v}" for k, v in env.items() if k in RUNNER_ENV] if engine == "vllm" else []
    parsed = parse_engine_args(shlex.join([*runner_env, *args]), "sglang" if engine == "sglang" else "vllm")
    return with_engine_args(req, parsed, from_log=True, log_context=req.context)
