"""A plan request completed from the engine's own flags (``--engine-args``, or a log's non-default args)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from servelab.core.errors import UsageError
from servelab.plan.budget import PlanRequest
from servelab.plan.calibrate import Reported
from servelab.plan.engine_args import EngineArgs, parse_engine_args
from servelab.plan.llamacpp_args import llamacpp_request
from servelab.plan.quant import KV_DTYPES, QUANTS
from servelab.plan.resolve import Resolved, load_preset, preset_names, resolve_model
from servelab.plan.spec import ModelSpec, UnknownArchitecture

VLLM_KV_DTYPES = {"auto": "auto", "bfloat16": "bf16", "float16": "fp16", "fp8": "fp8", "fp8_e4m3": "fp8_e4m3",
                  "fp8_e5m2": "fp8_e5m2", "fp8_inc": "fp8"}  # fmt: skip


# EngineArgs field -> PlanRequest field, taken as given
SIMPLE = {
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


def _kv_dtype(value: str) -> str:
    name = VLLM_KV_DTYPES.get(value.lower(), value.lower())
    if name not in KV_DTYPES:
        raise UsageError(f"--kv-cache-dtype {value!r} is not one servelab models", hint=", ".join(VLLM_KV_DTYPES))
    return name


def with_engine_args(
    req: PlanRequest,
    args: EngineArgs,
    *,
    from_log: bool = False,
    log_context: int | None = None,
    suggest: bool = False,
) -> PlanRequest:
    """The request as the engine's flags set it, every flag they leave out at vLLM's default for the card
    (plan/defaults.py), as the engine they start would run; ``suggest``: the plan's own concurrency and
    utilisation instead, written into the command."""
    if req.engine == "llamacpp":
        return llamacpp_request(req, args)
    changes: dict[str, Any] = {"engine_args": args, "suggest": suggest and not from_log}
    for source, target in SIMPLE.items():
        value = getattr(args, source)
        if value is not None:
            changes[target] = value
    if args.kv_cache_dtype:
        changes["kv_dtype"] = _kv_dtype(args.kv_cache_dtype)
    if args.disable_hybrid_kv_cache_manager is not None:
        changes["hybrid_kv_cache_manager"] = not args.disable_hybrid_kv_cache_manager
    if args.quantization and args.quantization.lower() in QUANTS:
        changes["quant"] = args.quantization.lower()
    if from_log and args.max_model_len is None and log_context:
        changes["context"] = log_context  # the model's own maximum, as the log's run used
    changes["defaulted"] = _defaulted(req, args, suggest=suggest and not from_log, from_log=from_log)
    return replace(req, **changes)


def _defaulted(req: PlanRequest, args: EngineArgs, *, suggest: bool, from_log: bool) -> tuple[str, ...]:
    """The settings the flags leave to vLLM: its batch sizes and utilisation (unless the plan suggests its own)
    and, for typed flags, the context (the model's maximum)."""
    if not req.engine.startswith("vllm"):
        return req.defaulted
    out = [name for name in ("max_num_batched_tokens",) if getattr(args, name) is None]
    if not suggest:
        out += [name for name in ("max_num_seqs",) if args.max_num_seqs is None]
        if args.gpu_memory_utilization is None and args.kv_cache_memory_bytes is None:
            out.append("gpu_memory_utilization")
        if args.max_model_len is None and not from_log:
            out.append("max_model_len")
    return tuple(out)


# servelab's own options that set an engine flag: beside --engine-args, each must be one of the flags
SIDE_FLAGS = {"--context": "--max-model-len", "--gpu-memory-utilization": "--gpu-memory-utilization",
              "--max-num-batched-tokens": "--max-num-batched-tokens", "--enforce-eager": "--enforce-eager",
              "--block-size": "--block-size", "--tp": "--tensor-parallel-size", "--kv-dtype": "--kv-cache-dtype",
              "--kv-pool": "--kv-cache-memory-bytes", "--quant": "--quantization"}  # fmt: skip
NEVER_SUGGESTED = ("--quant",)  # --suggest writes its concurrency and utilisation, never a quantization


def check_side_options(given: list[str], suggest: bool) -> None:
    """Beside --engine-args, a servelab option that sets an engine flag would plan a command the flags are not:
    refused, naming the flag to add, unless --suggest asks the plan to write its own values in."""
    given = [option for option in given if option in NEVER_SUGGESTED] if suggest else given
    if not given:
        return
    option = given[0]
    raise UsageError(
        f"{option} is not one of the --engine-args flags: the plan is of your flags exactly, and vLLM would not "
        f"see {option}",
        hint=f"put {SIDE_FLAGS.get(option, option)} in --engine-args"
        + (
            ""
            if option in NEVER_SUGGESTED
            else ", or add --suggest to have the plan write its own values into the command"
        ),
    )


def engine_request(
    req: PlanRequest, engine_args: str | None, reported: Reported | None, *, suggest: bool = False
) -> PlanRequest:
    """--engine-args when given; else a calibration log's own non-default args (so they need not be repeated)."""
    if engine_args:
        return with_engine_args(req, parse_engine_args(engine_args, req.engine), suggest=suggest)
    if reported is not None and reported.engine == "llamacpp":  # its own -c split over -np, and the KV type
        return replace(req, engine="llamacpp", context=reported.max_model_len or req.context,
                       concurrency=reported.slots or req.concurrency,
                       kv_dtype=reported.kv_type or req.kv_dtype)  # fmt: skip
    if reported is not None and reported.engine_args is not None:
        return with_engine_args(req, reported.engine_args, from_log=True, log_context=reported.max_model_len)
    return req


def check_same_model(named: str, resolved: Resolved, args: EngineArgs | None) -> str | None:
    """The flags' own model (``vllm serve M``, ``--model M``) must be the one planned: a command serving a model
    of another shape is refused, never planned as this one. The same name (as typed, as served, or its last path
    part) passes; another name passes where servelab can read it (a folder, the local HF cache, a preset's hub id)
    and it has the planned model's shape (a fine-tune, a later checkpoint); one it cannot read is said in the note
    this returns (the plan is of the model named, its config the only one at hand)."""
    served = args.model if args else None
    if not served:
        return None
    names = {named, resolved.serve_as, str(resolved.spec.name)}
    if served in names or _last(served) in {_last(n) for n in names}:
        return None
    other = _readable(served)
    if other is None:
        return (f"the flags serve {served!r}, which servelab cannot read here (no folder, no copy in the local HF "
                f"cache): planned with the config of {named!r}")  # fmt: skip
    if _shape(other.spec) == _shape(resolved.spec):
        return None
    raise UsageError(f"the flags serve {served!r}, a model of another shape than {named!r}: name one model",
                     hint=f"servelab plan {served} --engine-args ...")  # fmt: skip


def _readable(name: str) -> Resolved | None:
    """The model ``name`` names where servelab can read it without a download: a folder, the HF cache, or the
    preset whose hub id it is."""
    by_id = next((p for p in preset_names() if load_preset(p)[0].get("_name_or_path") == name), None)
    try:
        return resolve_model(by_id or name)
    except (UsageError, UnknownArchitecture, OSError, ValueError):
        return None


def _shape(spec: ModelSpec) -> tuple[object, ...]:
    return spec.model_type, spec.hidden_size, len(spec.layers), spec.vocab_size


def _last(name: str) -> str:
    return name.rstrip("/").rsplit("/", 1)[-1].lower()
