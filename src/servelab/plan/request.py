"""A plan request completed from the engine's own flags (``--engine-args``, or a log's non-default args)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from servelab.core.errors import UsageError
from servelab.plan.budget import PlanRequest
from servelab.plan.calibrate import Reported
from servelab.plan.engine_args import EngineArgs, parse_engine_args
from servelab.plan.overhead import default_max_num_seqs
from servelab.plan.quant import KV_DTYPES, QUANTS

VLLM_DEFAULT_UTIL = 0.92  # vLLM 0.25's --gpu-memory-utilization default
VLLM_KV_DTYPES = {"auto": "auto", "bfloat16": "bf16", "float16": "fp16", "fp8": "fp8", "fp8_e4m3": "fp8_e4m3",
                  "fp8_e5m2": "fp8_e5m2", "fp8_inc": "fp8"}  # fmt: skip


def _kv_dtype(value: str) -> str:
    name = VLLM_KV_DTYPES.get(value.lower(), value.lower())
    if name not in KV_DTYPES:
        raise UsageError(f"--kv-cache-dtype {value!r} is not one servelab models", hint=", ".join(VLLM_KV_DTYPES))
    return name


def with_engine_args(
    req: PlanRequest, args: EngineArgs, *, from_log: bool = False, log_context: int | None = None
) -> PlanRequest:
    """The request as the engine's flags set it; a log's run used vLLM's defaults for the rest."""
    changes: dict[str, Any] = {"engine_args": args}
    simple = {
        "max_model_len": "context",
        "gpu_memory_utilization": "gpu_memory_utilization",
        "max_num_seqs": "max_num_seqs",
        "max_num_batched_tokens": "max_num_batched_tokens",
        "block_size": "block_size",
        "enforce_eager": "enforce_eager",
        "mamba_ssm_cache_dtype": "mamba_ssm_cache_dtype",
        "mamba_cache_dtype": "mamba_cache_dtype",
        "tensor_parallel_size": "tp",
        "kv_cache_memory_bytes": "kv_pool_bytes",
        "enable_prefix_caching": "enable_prefix_caching",
    }
    for source, target in simple.items():
        value = getattr(args, source)
        if value is not None:
            changes[target] = value
    if args.kv_cache_dtype:
        changes["kv_dtype"] = _kv_dtype(args.kv_cache_dtype)
    if args.disable_hybrid_kv_cache_manager is not None:
        changes["hybrid_kv_cache_manager"] = not args.disable_hybrid_kv_cache_manager
    if args.quantization and args.quantization.lower() in QUANTS:
        changes["quant"] = args.quantization.lower()
    if from_log and args.max_num_seqs is None:
        changes["max_num_seqs"] = default_max_num_seqs(req.gpu_bytes)
    if from_log and args.gpu_memory_utilization is None and args.kv_cache_memory_bytes is None:
        changes["gpu_memory_utilization"] = VLLM_DEFAULT_UTIL
    if from_log and args.max_model_len is None and log_context:
        changes["context"] = log_context  # the model's own maximum, as the log's run used
    return replace(req, **changes)


def engine_request(req: PlanRequest, engine_args: str | None, reported: Reported | None) -> PlanRequest:
    """--engine-args when given; else a calibration log's own non-default args (so they need not be repeated)."""
    if engine_args:
        return with_engine_args(req, parse_engine_args(engine_args, req.engine))
    if reported is not None and reported.engine == "llamacpp":  # its own -c split over -np, and the KV type
        return replace(req, engine="llamacpp", context=reported.max_model_len or req.context,
                       concurrency=reported.slots or req.concurrency,
                       kv_dtype=reported.kv_type or req.kv_dtype)  # fmt: skip
    if reported is not None and reported.engine_args is not None:
        return with_engine_args(req, reported.engine_args, from_log=True, log_context=reported.max_model_len)
    return req
