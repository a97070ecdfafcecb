"""Per-engine capacity: how much KV/state memory an engine gets, and how many tokens that holds."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from servelab.plan.spec import ModelSpec
from servelab.plan.vllm_rules import VllmLayout, VllmOptions, vllm_layout

EngineName = Literal["vllm", "vllm-cpu", "sglang", "llamacpp"]
GIB = 2**30

# Memory vLLM takes besides weights and KV: activation peak of the profile run, non-torch memory
# (CUDA context, NCCL, allocator) and CUDA graphs. Fitted to two H200 starts of vLLM 0.25.1
# (shared/gpu/logs: SmolLM2-135M 1.10 GiB, Laguna S 2.1 FP8 5.44 GiB) and checked against more
# architectures in docs/plan-calibration.md. It is the least certain term of a plan.
VLLM_MIN_OVERHEAD = int(1.1 * GIB)
VLLM_OVERHEAD_PER_WEIGHT = 0.05
# SGLang reserves activation memory out of (1 - mem_fraction_static).


def vllm_overhead(weights_bytes: int) -> int:
    return max(VLLM_MIN_OVERHEAD, int(VLLM_OVERHEAD_PER_WEIGHT * weights_bytes))


@dataclass(frozen=True, slots=True)
class Capacity:
    """What one engine can hold in ``pool_bytes`` of KV/state memory."""

    engine: str
    pool_bytes: int
    tokens: int  # the engine's own "KV cache size" figure
    max_sequences: float  # concurrent sequences of the full context length
    bytes_per_sequence: int  # at the context length
    rule: str


def vllm_capacity(spec: ModelSpec, opts: VllmOptions, pool_bytes: int, engine: str = "vllm") -> Capacity:
    layout: VllmLayout = vllm_layout(spec, opts)
    return Capacity(
        engine=engine,
        pool_bytes=pool_bytes,
        tokens=layout.capacity_tokens(pool_bytes),
        max_sequences=layout.max_concurrency(pool_bytes),
        bytes_per_sequence=layout.blocks_per_request * layout.bytes_per_block,
        rule=(
            f"{len(layout.groups)} cache group(s), block {layout.groups[0].block_size} tokens, "
            f"{layout.bytes_per_block:,} B per block, {layout.blocks_per_request} blocks per "
            f"{opts.max_model_len:,}-token request"
        ),
    )


def sglang_capacity(spec: ModelSpec, context: int, kv_bytes: float, pool_bytes: int, model_bytes: int = 2,
                    tp: int = 1) -> Capacity:  # fmt: skip
    """SGLang's token pool, one GPU's share of it under tensor parallelism (its KV heads split over the ranks, as
    vLLM's): page size 1; sliding layers kept whole unless its SWA pool is enabled; recurrent state in a
    separate pool of fixed-size slots."""
    per_token = sum(layer.kv_bytes_per_token(kv_bytes, tp) for layer in spec.layers)
    state = spec.state_bytes_per_sequence(model_bytes, tp=tp)
    per_seq = int(per_token * context + state)
    tokens = int(pool_bytes // per_token) if per_token else 0
    return Capacity(
        "sglang",
        pool_bytes,
        tokens,
        pool_bytes / per_seq if per_seq else math.inf,
        per_seq,
        "token pool, page 1; sliding layers counted whole (no --enable-hybrid-swa-memory)",
    )


LLAMACPP_PAD = 256  # llama.cpp pads the context, and each slot's share, to 256 cells
LLAMACPP_UBATCH = 512  # -ub's default: SWA layers keep their window plus one micro-batch


def _pad(value: int, step: int = LLAMACPP_PAD) -> int:
    return -(-value // step) * step


def llamacpp_cells(context: int, parallel: int, unified: bool = False) -> tuple[int, int]:
    """(cells in all, cells per slot) as llama-context.cpp sizes them: -c padded to 256, then split over
    the -np slots, each share padded to 256 again (one stream per slot unless --kv-unified)."""
    n_ctx = _pad(context)
    if unified or parallel <= 1:
        return n_ctx, n_ctx
    per_slot = _pad(n_ctx // parallel)
    return per_slot * parallel, per_slot


def llamacpp_capacity(
    spec: ModelSpec,
    context: int,
    parallel: int,
    kv_bytes: float,
    pool_bytes: int,
    swa_full: bool = False,
    model_bytes: int = 2,
    unified: bool = False,
    ubatch: int = LLAMACPP_UBATCH,
) -> Capacity:
    """llama-server: -c N is split across -np slots; SWA layers keep their window plus a micro-batch per
    slot (padded to 256; one window per slot in a unified cache) unless --swa-full; the cache is allocated
    whole at start (``llama_kv_cache_iswa``)."""
    cells, per_slot = llamacpp_cells(context, parallel, unified)
    full = sum(layer.kv_bytes_per_token(kv_bytes) for layer in spec.layers if layer.kind != "sliding")
    swa = 0.0
    for layer in spec.layers:
        if layer.kind == "sliding" and layer.window:
            window = layer.window * (parallel if unified else 1) + ubatch
            kept = per_slot if swa_full else _pad(min(per_slot, window))
            swa += layer.kv_bytes_per_token(kv_bytes) * kept
    cache = full * per_slot + swa  # one slot's stream; a unified cache is one stream for all slots
    per_seq = int((cache / max(1, parallel) if unified else cache) + spec.state_bytes_per_sequence(model_bytes))
    said = (f"-c {context}, one cache of {cells} cells for -np {parallel} slots" if unified
            else f"-c {context} split over -np {parallel}: {per_slot} cells per slot")  # fmt: skip
    return Capacity("llamacpp", pool_bytes, cells, pool_bytes / per_seq if per_seq else math.inf, per_seq, said)


def llamacpp_compute_bytes(spec: ModelSpec, context: int, parallel: int, ubatch: int = LLAMACPP_UBATCH, *,
                           unified: bool = False) -> int:  # fmt: skip
    """llama.cpp's CPU compute buffer with flash attention (its default where the backend has it): the
    attention mask, ``cells per slot x ubatch`` f16, plus the micro-batch's f32 activations
    (``4 x (4 hidden + 3 ffn)`` bytes a token). Checked on SmolLM2 against llama-server 0.3.36's own log
    (docs/llamacpp.md): within 0.3% with f16 KV, ~1 MiB over with quantized KV."""
    _, per_slot = llamacpp_cells(context, parallel, unified)
    ffn = spec.intermediate_size or 4 * spec.hidden_size
    return per_slot * ubatch * 2 + ubatch * 4 * (4 * spec.hidden_size + 3 * ffn)
