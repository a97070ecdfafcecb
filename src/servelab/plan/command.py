"""The command line a plan prints: the user's own engine flags, completed with what the plan decided."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from servelab.plan.budget import PlanRequest
    from servelab.plan.resolve import Resolved


def _vllm(model: str, req: PlanRequest, util: float) -> str:
    additions: list[tuple[str, str | None]] = [
        ("--max-model-len", str(req.context)),
        ("--max-num-seqs", str(req.seqs_limit)),
        ("--gpu-memory-utilization", f"{util:.2f}"),
    ]
    if req.kv_dtype.startswith("fp8"):
        additions.append(("--kv-cache-dtype", req.kv_dtype))
    if req.tp > 1:
        additions.append(("--tensor-parallel-size", str(req.tp)))
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
        return (
            f"python -m sglang.launch_server --model-path {model} --context-length {req.context} "
            f"--max-running-requests {req.concurrency} --mem-fraction-static {util:.2f}"
            + (" --kv-cache-dtype fp8_e4m3" if req.kv_dtype.startswith("fp8") else "")
        )
    kv = "" if req.kv_dtype in ("bf16", "fp16", "auto") else f" -ctk {req.kv_dtype} -ctv {req.kv_dtype} -fa on"
    return f"llama-server -m MODEL.gguf -c {req.context * req.concurrency} -np {req.concurrency} -ngl 999{kv}"
