"""llama-server's flags as the plan reads them: ``-c`` split over ``-np`` slots (absent or ``-np -1``: its
automatic 4), no ``-c`` (or ``-c 0``): each slot holds the model's whole context (llama-server 0.3.36 logged
``n_ctx = 16384`` for ``-np 2`` on SmolLM2's 8,192, docs/sweep.md); ``-ctk`` the cache type, ``-ub``, ``--swa-full`` and
``--kv-unified`` as its cache and compute buffers take them. A flag that changes what the GPU holds in a way the
plan does not model (layers or experts left on the host, a V cache unlike K, tensor splits, adapters, a
multimodal projector) is refused by name: the plan is of the flags given, or of none."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from servelab.core.errors import UsageError
from servelab.plan.engine_args import EngineArgs

if TYPE_CHECKING:
    from servelab.plan.budget import PlanRequest

AUTO_SLOTS = 4  # llama-server's -np -1 (auto)
KV_TYPES = {"f16": "auto", "bf16": "bf16", "f32": "auto", "q8_0": "q8_0", "q4_0": "q4_0"}
ALL_LAYERS = ("-1", "all", "auto", "999")
UNMODELLED = {  # flag -> what it changes that the plan does not model
    "-nkvo": "the KV cache kept on the host", "--no-kv-offload": "the KV cache kept on the host",
    "-ts": "a split over several GPUs", "--tensor-split": "a split over several GPUs",
    "-sm": "a split over several GPUs", "--split-mode": "a split over several GPUs",
    "-ot": "tensors placed by pattern", "--override-tensor": "tensors placed by pattern",
    "-cmoe": "experts kept on the host", "--cpu-moe": "experts kept on the host",
    "-ncmoe": "experts kept on the host", "--n-cpu-moe": "experts kept on the host",
    "-mm": "a multimodal projector", "--mmproj": "a multimodal projector", "-mmu": "a multimodal projector",
    "--mmproj-url": "a multimodal projector", "--lora": "LoRA adapters", "--lora-scaled": "LoRA adapters",
    "-dev": "the devices used", "--device": "the devices used",
}  # fmt: skip


def check_flags(args: EngineArgs) -> None:
    """Refuse, by name, a flag that changes the GPU's share in a way the plan does not model."""
    for token in args.tokens:
        flag = token.partition("=")[0]
        if flag in UNMODELLED:
            raise UsageError(f"--engine-args: llama-server's {flag} ({UNMODELLED[flag]}) is not modelled: a plan "
                             "without it would be of another command", hint=f"plan without {flag}")  # fmt: skip
    if args.cache_type_v and args.cache_type_v.lower() != (args.kv_cache_dtype or "f16").lower():
        raise UsageError(
            f"--engine-args: -ctv {args.cache_type_v} unlike -ctk {args.kv_cache_dtype or 'f16'}: a V cache of "
            "another type than K is not modelled",
            hint="give -ctk and -ctv the same type",
        )


def check_offload(args: EngineArgs | None, layers: int) -> None:
    """-ngl N under the model's layer count leaves layers on the host: not modelled, refused."""
    value = (args.gpu_layers or "").lower() if args else ""
    if not value or value in ALL_LAYERS:
        return
    if not value.lstrip("-").isdigit():
        raise UsageError(f"--engine-args: -ngl {value!r} is not a layer count, auto or all")
    if int(value) < layers:
        raise UsageError(
            f"--engine-args: -ngl {value} keeps {layers - int(value)} of the model's {layers} layers on the host: "
            "a partial offload is not modelled",
            hint="plan with every layer on the GPU (-ngl all)",
        )


def llamacpp_request(req: PlanRequest, args: EngineArgs) -> PlanRequest:
    """The request as llama-server's flags set it (the module docstring); no -c: the model's context a slot."""
    check_flags(args)
    slots = args.max_num_seqs or AUTO_SLOTS
    kv = (args.kv_cache_dtype or "f16").lower()
    changes: dict[str, Any] = {"engine_args": args, "concurrency": slots, "kv_dtype": KV_TYPES.get(kv, kv),
                               "suggest": False}  # fmt: skip
    if args.max_model_len:
        changes["context"] = max(1, args.max_model_len // slots)
        changes["defaulted"] = ()
    else:
        changes["defaulted"] = ("max_model_len",)
    return replace(req, **changes)
