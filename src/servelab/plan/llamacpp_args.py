"""llama-server's flags as the plan reads them: ``-c`` split over ``-np`` slots (absent or ``-np -1``: its
automatic 4, with one cache for all of them), no ``-c`` (or ``-c 0``): each slot holds the model's whole context
(llama-server 0.3.36 logged ``n_ctx = 16384`` for ``-np 2`` on SmolLM2's 8,192, docs/sweep.md); ``-ctk``/``-ctv``
the cache type, ``-ub``, ``--swa-full`` and ``--kv-unified`` as its cache and compute buffers take them. A flag that
changes what the GPU holds in a way the plan does not model (layers or experts left on the host, a V cache unlike
K, tensor splits, adapters, a multimodal projector) is refused by name: the plan is of the flags given, or of
none."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from servelab.core.errors import UsageError
from servelab.plan.engine_args import EngineArgs
from servelab.plan.engines import LLAMACPP_UBATCH

if TYPE_CHECKING:
    from servelab.plan.budget import PlanRequest

AUTO_SLOTS = 4  # llama-server's -np -1 (auto), which also makes the cache unified (tools/server/server.cpp)
CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")  # -ctk / -ctv (common/arg.cpp)
BATCH = 2048  # -b's default; the micro-batch (-ub, LLAMACPP_UBATCH by default) is at most the batch
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
    k, v = (args.kv_cache_dtype or "f16").lower(), (args.cache_type_v or "f16").lower()
    for flag, kind in (("-ctk", k), ("-ctv", v)):
        if kind not in CACHE_TYPES:
            raise UsageError(f"--engine-args: {flag} {kind}: llama-server has no such cache type",
                             hint=", ".join(CACHE_TYPES))  # fmt: skip
    if k != v:  # each defaults to f16: -ctk q8_0 alone keeps V at f16
        raise UsageError(
            f"--engine-args: -ctk {k} with -ctv {v}: a V cache of another type than K is not modelled",
            hint="give -ctk and -ctv the same type",
        )


def check_offload(args: EngineArgs | None, layers: int) -> None:
    """-ngl N under the model's layer count leaves layers on the host: not modelled, refused."""
    value = (args.gpu_layers or "").lower() if args else ""
    if not value or value in ALL_LAYERS:
        return
    if not (value.isascii() and value.isdigit()):
        raise UsageError(f"--engine-args: -ngl {value!r} is not a layer count, auto or all")
    if int(value) < layers + 1:  # the output layer counts as one more ("offloaded 33/33 layers" for 32)
        raise UsageError(
            f"--engine-args: -ngl {value} keeps {layers + 1 - int(value)} of the model's {layers + 1} layers (its "
            "output layer one of them) on the host: a partial offload is not modelled",
            hint="plan with every layer on the GPU (-ngl all)",
        )


def cache_flags(args: EngineArgs | None) -> dict[str, Any]:
    """llama-server's flags that shape its cache and compute buffers, as llamacpp_capacity takes them: the micro-
    batch (at most the batch), --swa-full, and a unified cache (--kv-unified, or -np left to its automatic 4)."""
    if args is None:
        return {}
    unified = args.kv_unified if args.kv_unified is not None else args.max_num_seqs is None
    ubatch = min(args.ubatch or LLAMACPP_UBATCH, args.max_num_batched_tokens or BATCH)
    return {"swa_full": bool(args.swa_full), "unified": unified, "ubatch": ubatch}


def llamacpp_request(req: PlanRequest, args: EngineArgs) -> PlanRequest:
    """The request as llama-server's flags set it (the module docstring); no -c: the model's context a slot."""
    check_flags(args)
    slots = args.max_num_seqs or AUTO_SLOTS
    changes: dict[str, Any] = {"engine_args": args, "concurrency": slots, "suggest": False,
                               "kv_dtype": (args.kv_cache_dtype or "f16").lower()}  # fmt: skip
    if args.max_model_len:
        changes["context"] = max(1, args.max_model_len // slots)
        changes["defaulted"] = ()
    else:
        changes["defaulted"] = ("max_model_len",)
    return replace(req, **changes)
