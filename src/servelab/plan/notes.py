"""The plan's notes: what it read, what it assumed, and what it does not model for this model and these flags."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servelab.plan.cudagraphs import v2_model_runner
from servelab.plan.quant import WeightEstimate
from servelab.plan.resolve import Resolved

if TYPE_CHECKING:
    from servelab.plan.budget import PlanRequest


def plan_notes(resolved: Resolved, req: PlanRequest, weights: WeightEstimate, draft: str | None) -> list[str]:
    from servelab.plan.budget import engine_shape  # budget builds the plan and calls this

    spec = resolved.spec
    notes = list(spec.notes)
    declared = spec.quantization
    if declared and req.quant and req.quant != declared.name:
        notes.append(f"--quant {req.quant} overrides the checkpoint's own {declared.source}")
    elif declared and not req.quant and weights.method.startswith("estimate"):
        notes.append(f"weights read from {declared.source}")
    if spec.count("linear") or spec.count("mamba"):
        notes.append("recurrent layers hold a constant state per sequence; vLLM pads it to one attention page")
        if req.engine.startswith("vllm") and not req.enable_prefix_caching:
            notes.append("vLLM leaves prefix caching off for this model unless --enable-prefix-caching: every turn "
                         "of a session is then a full prefill")  # fmt: skip
    if req.engine == "vllm":
        notes.append("engine overhead (activations, CUDA graphs, non-torch) is modelled: check it with --calibrate")
    method = req.engine_args.speculative_method if req.engine_args else None
    other_draft = req.engine_args.speculative_model if req.engine_args and req.engine != "vllm" else None
    if other_draft:
        notes.append(f"speculative decoding: {req.engine}'s draft model ({other_draft}) is not counted: its weights, "
                     "KV and buffers are missing from this plan")  # fmt: skip
    if draft:
        notes.append(draft)
    elif method not in (None, "ngram", "ngram_gpu", "suffix", "custom_class", "extract_hidden_states"):
        notes.append(f"speculative decoding ({method}): the draft's weights and KV are not counted")
    elif method is not None and req.engine == "vllm" and v2_model_runner(spec, engine_shape(resolved, req)):
        notes.append(f"speculative decoding ({method}): its proposer's profile-run memory on vLLM's V2 model "
                     "runner is not modelled")  # fmt: skip
    if req.engine == "llamacpp" and spec.max_position and req.context > spec.max_position:
        notes.append(f"{req.context:,} tokens a slot is past the {spec.max_position:,} the model was trained on "
                     "(llama.cpp warns and serves it)")  # fmt: skip
    if req.engine_args and req.engine_args.given():
        read = ", ".join(f"{k}={v}" for k, v in req.engine_args.given().items() if k != "model")
        notes.append(f"from the engine's own flags: {read}")
    return notes
