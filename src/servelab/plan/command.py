"""The command line a plan prints: the user's own engine flags, completed with what the plan decided."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from servelab.plan.defaults import batch_modes, completed_batch, vllm_batch_defaults

if TYPE_CHECKING:
    from servelab.plan.budget import PlanRequest
    from servelab.plan.resolve import Resolved


def _unlike_defaults(req: PlanRequest) -> list[tuple[str, str | None]]:
    """The planned settings vLLM would not take by itself: a token budget other than its default for the card,
    eager mode, a block size other than its own."""
    out: list[tuple[str, str | None]] = []
    base = vllm_batch_defaults(req.engine, req.visible_bytes, req.gpu_name, req.tp)
    if req.max_num_batched_tokens != completed_batch(base, req.context, req.seqs_limit, None, **batch_modes(req))[1]:
        out.append(("--max-num-batched-tokens", str(req.max_num_batched_tokens)))
    if req.enforce_eager:
        out.append(("--enforce-eager", None))
    if req.block_size != (128 if req.engine == "vllm-cpu" else 16):
        out.append(("--block-size", str(req.block_size)))
    return out


def _vllm(model: str, req: PlanRequest, util: float) -> str:
    """servelab's own command with every planned value in it; the user's flags as typed (the engine's defaults
    for the rest), or with --suggest completed with the plan's values."""
    if req.engine_args is not None and not req.suggest:
        tokens = list(req.engine_args.tokens)
        return shlex.join(["vllm", "serve", *([] if req.engine_args.model else [model]), *tokens])
    additions: list[tuple[str, str | None]] = [
        ("--max-model-len", str(req.context)),
        ("--max-num-seqs", str(req.seqs_limit)),
        ("--gpu-memory-utilization", f"{util:.2f}"),
    ]
    if req.kv_dtype.startswith("fp8"):
        additions.append(("--kv-cache-dtype", req.kv_dtype))
    if req.tp > 1:
        additions.append(("--tensor-parallel-size", str(req.tp)))
    additions += _unlike_defaults(req)
    if req.engine_args is None:
        return shlex.join(["vllm", "serve", model, *[x for flag, value in additions for x in (flag, value) if x]])
    tokens = req.engine_args.completed(additions)
    if not req.engine_args.model:
        tokens = [model, *tokens]
    return shlex.join(["vllm", "serve", *tokens])


def command_line(resolved: Resolved, req: PlanRequest, util: float) -> str:
    model = resolved.serve_as
    if req.engine.startswith("vllm"):
        return _vllm(model, req, util)
    if req.engine == "sglang":
        if req.engine_args is not None and not req.suggest:  # the user's flags as typed
            given = list(req.engine_args.tokens)
            head = [] if "--model-path" in given or "--model" in given else ["--model-path", model]
            return shlex.join(["python", "-m", "sglang.launch_server", *head, *given])
        return (
            f"python -m sglang.launch_server --model-path {model} --context-length {req.context} "
            f"--max-running-requests {req.concurrency} --mem-fraction-static {util:.2f}"
            + (" --kv-cache-dtype fp8_e4m3" if req.kv_dtype.startswith("fp8") else "")
            + (f" --tp-size {req.tp}" if req.tp > 1 else "")
        )
    if req.engine_args is not None:  # llama-server: the user's flags as typed
        given = list(req.engine_args.tokens)
        head = [] if {"-m", "--model", "-hf", "--hf-repo"} & set(given) else ["-m", "MODEL.gguf"]
        return shlex.join(["llama-server", *head, *given])
    kv = "" if req.kv_dtype in ("bf16", "fp16", "auto") else f" -ctk {req.kv_dtype} -ctv {req.kv_dtype} -fa on"
    return f"llama-server -m MODEL.gguf -c {req.context * req.concurrency} -np {req.concurrency} -ngl 999{kv}"
