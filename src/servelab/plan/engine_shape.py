"""The engine flags that decide vLLM's memory besides weights and KV (plan/overhead.py, plan/cudagraphs.py)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from servelab.plan.engine_args import EngineArgs


@dataclass(frozen=True, slots=True)
class EngineShape:
    """The flags that decide the overhead."""

    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 1024  # vLLM's default on GPUs of 70 GiB or more (256 below)
    enforce_eager: bool = False
    tp: int = 1
    max_cudagraph_capture_size: int | None = None  # None: vLLM's default
    quant: str = "bf16"
    speculative_method: str | None = None  # --speculative-config's method (None: no speculation)
    num_speculative_tokens: int = 0  # --speculative-config's num_speculative_tokens (the decode query is 1 + this)
    parallel_drafting: bool = False  # --speculative-config's parallel_drafting (P-EAGLE: V1)
    draft_probabilistic: bool = False  # --speculative-config's draft_sample_method "probabilistic" (standard rejection)
    cudagraph_capture_sizes: tuple[int, ...] | None = None  # --cudagraph-capture-sizes / -cc.cudagraph_capture_sizes
    optimization_level: int = 2  # -O
    cudagraph_mode: str | None = None  # -cc.cudagraph_mode (None: the -O level's)
    compilation_mode: int | None = None  # -cc.mode (None: VLLM_COMPILE from -O1, none at -O0)
    lora: bool = False  # --enable-lora: graphs captured with and without LoRA
    interactivity: bool = False  # --performance-mode interactivity: sizes 1..32 one by one
    use_v2_model_runner: bool | None = None  # VLLM_USE_V2_MODEL_RUNNER (None: unset)
    estimate_cudagraphs: bool = True  # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS
    torch_compile_disable: bool = False  # TORCH_COMPILE_DISABLE=1: compilation off (so no piecewise graphs)
    v2_blockers: tuple[str, ...] = ()  # flags on that V2 lacks (prompt embeds, raw logits, logits processors, ...)


def with_flags(shape: EngineShape, args: EngineArgs | None) -> EngineShape:
    """The shape as the user's own vLLM flags and environment set the model runner and the CUDA graphs."""
    if args is None:
        return shape
    taken: dict[str, Any] = {
        "speculative_method": args.speculative_method,
        "num_speculative_tokens": args.num_speculative_tokens if args.speculative_method else None,
        "parallel_drafting": args.parallel_drafting,
        "draft_probabilistic": args.draft_probabilistic,
        "optimization_level": args.optimization_level,
        "cudagraph_mode": args.cudagraph_mode,
        "compilation_mode": args.compilation_mode,
        "max_cudagraph_capture_size": args.max_cudagraph_capture_size,
        "cudagraph_capture_sizes": args.cudagraph_capture_sizes,
        "lora": args.enable_lora,
        "interactivity": (args.performance_mode == "interactivity") if args.performance_mode else None,
        "use_v2_model_runner": args.use_v2_model_runner,
        "estimate_cudagraphs": args.estimate_cudagraphs,
        "torch_compile_disable": args.torch_compile_disable,
        "v2_blockers": args.v2_blockers,
    }
    return replace(shape, **{k: v for k, v in taken.items() if v is not None})
