"""The plan's answer: the context it defaults to, and, for a plan that does not fit, what would. Each way out is the
plan made again with one change (an 8-bit KV cache, a smaller quantization, a shorter context, fewer sessions),
never a guess; only a change whose plan fits is said, with that plan's own verdict."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from servelab.core.errors import UsageError
from servelab.plan.budget import Plan, PlanRequest, make_plan
from servelab.plan.defaults import with_defaults
from servelab.plan.resolve import Resolved

DEFAULT_CONTEXT = 32768  # the plan's context when none is asked and the model holds at least this
CONTEXT_STEP = 1024  # a shorter context is suggested in whole K
KV_WAY_OUT = {"vllm": "fp8", "sglang": "fp8", "llamacpp": "q8_0"}  # the 8-bit KV cache each engine takes
QUANT_WAY_OUT = {  # smaller weights each engine loads, largest first: the first that fits is said
    "vllm": ("fp8", "int4", "nvfp4"),
    "sglang": ("fp8", "int4"),
    "llamacpp": ("gguf-q8_0", "gguf-q5_k_m", "gguf-q4_k_m"),
}


def model_context(req: PlanRequest, resolved: Resolved) -> tuple[PlanRequest, str | None]:
    """A request with no context asked (0) takes 32K, or the model's own maximum where that is shorter, and says
    which; an asked context is kept as asked (refused later when the model cannot hold it)."""
    if req.context or "max_model_len" in req.defaulted:  # asked, or the engine's own (plan/defaults.py)
        return req, None
    most = resolved.spec.max_position
    if most and most < DEFAULT_CONTEXT:
        return replace(req, context=most), f"context {most:,} tokens: the model's maximum (no --context given)"
    return replace(req, context=DEFAULT_CONTEXT), None


def plan_model(resolved: Resolved, req: PlanRequest) -> tuple[PlanRequest, Plan]:
    """The plan, its context defaulted from the model, and with the ways out when it does not fit; with the
    request as planned."""
    req, said = model_context(req, resolved)
    req, _ = with_defaults(req, resolved.spec.max_position)
    plan = make_plan(resolved, req)
    notes = [said, *plan.notes] if said else plan.notes
    return req, replace(plan, notes=notes, suggestions=[] if plan.fits else ways_out(resolved, req))


def ways_out(resolved: Resolved, req: PlanRequest) -> list[str]:
    """``--kv-dtype fp8: fits: holds 4.3 sessions ...`` for each single change whose plan fits."""
    found: list[str] = []
    kv = KV_WAY_OUT.get(req.engine)
    if kv and req.kv_dtype in ("auto", "bf16", "fp16"):
        _say(found, _spell(req, "kv", kv), _fitting(resolved, replace(req, kv_dtype=kv)))
    way, plan = _smaller_weights(resolved, req)
    _say(found, _spell(req, "quant", way.removeprefix("--quant ")) if way else way, plan)
    asked = replace(req, defaulted=tuple(d for d in req.defaulted if d != "max_model_len"))
    shorter = _largest(lambda n: replace(asked, context=n * CONTEXT_STEP), resolved, (req.context - 1) // CONTEXT_STEP)
    if shorter is not None:
        _say(found, _spell(req, "context", str(shorter[0])), shorter[1])
    fewer = _largest(lambda n: replace(req, concurrency=n), resolved, req.concurrency - 1)
    if fewer is not None:
        _say(found, _spell(req, "concurrency", str(fewer[0])), fewer[1])
    return found


def _spell(req: PlanRequest, what: str, value: str) -> str:
    """A way out as the user can take it: servelab's options, or, for a plan of the engine's own flags (where
    those options are refused), the engine flags to put in --engine-args."""
    if req.engine_args is None or req.suggest:
        return {"kv": f"--kv-dtype {value}", "quant": f"--quant {value}", "context": f"--context {value}k",
                "concurrency": f"--concurrency {value}"}[what]  # fmt: skip
    tokens = 1024 * int(value) if what == "context" else 0
    flags = {
        "vllm": {"kv": f"--kv-cache-dtype {value}", "context": f"--max-model-len {tokens}",
                 "concurrency": f"--max-num-seqs {value}"},
        "sglang": {"kv": "--kv-cache-dtype fp8_e4m3", "context": f"--context-length {tokens}",
                   "concurrency": f"--max-running-requests {value}"},
        "llamacpp": {"kv": f"-ctk {value} -ctv {value}", "context": f"-c {tokens * req.concurrency}",
                     "concurrency": f"-np {value}"},
    }.get(req.engine, {})  # fmt: skip
    if what == "quant":
        online = req.engine == "vllm" and value == "fp8"
        return "--quantization fp8 in --engine-args" if online else f"a checkpoint quantized to {value}"
    return f"{flags[what]} in --engine-args" if what in flags else f"--{what} {value}"


def _say(found: list[str], flag: str, plan: Plan | None) -> None:
    if plan is not None:
        found.append(f"{flag}: {plan.verdict}")


def _fitting(resolved: Resolved, req: PlanRequest) -> Plan | None:
    try:
        plan = make_plan(resolved, req)
    except UsageError:  # a change the model or the engine refuses is no way out
        return None
    return plan if plan.fits else None


def _smaller_weights(resolved: Resolved, req: PlanRequest) -> tuple[str, Plan | None]:
    """The first quantization, largest first, that makes the weights smaller and the plan fit."""
    if req.weights_bytes is not None:
        return "", None  # the weights were given: a quantization does not change them
    now = make_plan(resolved, req).weights.bytes
    for quant in QUANT_WAY_OUT.get(req.engine, ()):
        plan = _fitting(resolved, replace(req, quant=quant))
        if plan is not None and plan.weights.bytes < now:
            return f"--quant {quant}", plan
    return "", None


def _largest(changed: Callable[[int], PlanRequest], resolved: Resolved, high: int) -> tuple[int, Plan] | None:
    """The largest n in 1..high whose changed request fits, with its plan (bisected: a shorter context or fewer
    sessions never need more memory); None when even 1 does not fit."""
    low, best = 1, None
    while low <= high:
        mid = (low + high) // 2
        plan = _fitting(resolved, changed(mid))
        if plan is not None:
            best, low = (mid, plan), mid + 1
        else:
            high = mid - 1
    return best
