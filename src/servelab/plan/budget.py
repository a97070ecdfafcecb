"""The plan: will MODEL fit this GPU at this context and concurrency, next to its co-tenants?"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from servelab.core.errors import UsageError
from servelab.core.known_keys import meant
from servelab.core.results import PlanFigures, PlanRun
from servelab.plan import llamacpp_terms
from servelab.plan.calibrate import Comparison, Reported
from servelab.plan.ceiling import DecodeCeiling, decode_ceiling
from servelab.plan.ckpt_quant import QuantScheme
from servelab.plan.command import command_line
from servelab.plan.defaults import check_context, defaults_note, with_defaults
from servelab.plan.draft import fold_draft
from servelab.plan.engine_args import EngineArgs
from servelab.plan.engine_shape import EngineShape, with_flags
from servelab.plan.engines import (
    LLAMACPP_UBATCH,
    Capacity,
    llamacpp_capacity,
    llamacpp_compute_bytes,
    sglang_capacity,
    vllm_capacity,
)
from servelab.plan.llamacpp_args import cache_flags, check_offload
from servelab.plan.llamacpp_terms import Buffers
from servelab.plan.notes import plan_notes
from servelab.plan.overhead import Overhead, vllm_overhead
from servelab.plan.quant import GIB, WeightEstimate, check_quantization, estimate_weights, kv_dtype_bytes, scheme_for
from servelab.plan.resolve import Resolved
from servelab.plan.spec import RECURRENT
from servelab.plan.speed import Constants, SpeedPrediction, predict, workload
from servelab.plan.vllm_rules import MambaCacheMode, VllmOptions, vllm_layout

UTIL_STEP = 0.01
PLAN_ENGINES = ("vllm", "sglang", "llamacpp", "vllm-cpu")
CUDA_VISIBLE_SHARE = 143159 / 143771  # what CUDA reports of nvidia-smi's total (H200: 139.80 of 140.40 GiB)
MAMBA_PREFIX_ALL = {"jamba", "nemotron_h", "granitemoehybrid", "falcon_h1", "mamba", "mamba2", "zamba2"}


@dataclass(frozen=True, slots=True)
class PlanRequest:
    gpu_name: str
    gpu_bytes: int
    bandwidth_gbs: float | None
    context: int
    concurrency: int
    quant: str | None  # None: the checkpoint's own quantization_config, else 16-bit
    kv_dtype: str
    engine: str = "vllm"
    alongside: dict[str, int] = field(default_factory=dict)
    headroom: int = 0
    gpu_memory_utilization: float | None = None  # None: choose one
    weights_bytes: int | None = None  # override
    max_num_batched_tokens: int = 8192
    block_size: int = 16  # vLLM's default on GPUs; its CPU build uses 128
    kv_pool_bytes: int | None = None  # a fixed KV memory (--kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE)
    allow_long_context: bool = False  # plan a context beyond the model's own maximum anyway
    tp: int = 1
    max_num_seqs: int | None = None  # None: vLLM's default for the card (1024 from 70 GiB, else 256)
    enforce_eager: bool = False
    mamba_cache_dtype: str = "auto"
    mamba_ssm_cache_dtype: str = "auto"
    enable_prefix_caching: bool | None = None  # None: vLLM's default (off for hybrid models)
    hybrid_kv_cache_manager: bool | None = None
    cuda_total_bytes: int | None = None  # the total CUDA reports (vLLM's base), None: from gpu_bytes
    engine_args: EngineArgs | None = None  # the user's own flags, completed on the printed command line
    tflops: float | None = None  # the card's dense BF16 peak (the speed model's compute bound)
    speed_constants: Constants | None = None  # fitted (plan --fit), else the card's defaults
    prompt_tokens: int = 1024  # the prompt whose prefill and queued TTFT the plan predicts
    defaulted: tuple[str, ...] = ()  # settings that take the engine's default for the card (plan/defaults.py)
    suggest: bool = False  # with engine_args: write the plan's own values (--max-num-seqs, utilisation) in

    @property
    def visible_bytes(self) -> int:
        return self.cuda_total_bytes or int(self.gpu_bytes * CUDA_VISIBLE_SHARE)

    @property
    def seqs_limit(self) -> int:
        """max_num_seqs of the engine planned: the flags', else the printed command's (the concurrency)."""
        return self.max_num_seqs or self.concurrency


@dataclass(frozen=True, slots=True)
class Plan:
    model: str
    gpu: str
    engine: str
    fits: bool
    verdict: str
    reasons: list[str]
    weights: WeightEstimate
    overhead_bytes: int
    overhead_detail: str
    overhead_parts: dict[str, int]  # activation (profile-run peak), non_torch, cudagraphs
    cotenant_bytes: int
    headroom_bytes: int
    gpu_bytes: int
    util_min: float | None  # smallest gpu_memory_utilization that holds the requested concurrency
    util_max: float  # largest that leaves the co-tenants their memory
    util_chosen: float
    kv_pool_bytes: int
    capacity: Capacity
    kv_bytes_per_token: float
    state_bytes_per_sequence: int
    total_params: int
    active_params: int
    decode: DecodeCeiling
    command: str
    notes: list[str]
    suggestions: list[str] = field(default_factory=list)  # what would fit, each re-planned (plan/suggest.py)
    defaults: dict[str, Any] = field(default_factory=dict)  # the engine's defaults the plan took, by setting
    speed: SpeedPrediction | None = None  # decode, prefill and TTFT predicted (plan/speed.py); None: no card known

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["weights"]["gib"] = self.weights.gib
        return data

    def stored(self) -> PlanRun:
        """The typed result a plan run stores (every figure of the plan kept)."""
        return PlanRun(plan=PlanFigures.model_validate(self.to_dict()))


def scheme_of(resolved: Resolved, req: PlanRequest) -> QuantScheme:
    """--quant when given, else what the checkpoint declares, else 16-bit."""
    if req.quant:
        return scheme_for(req.quant)
    return resolved.spec.quantization or scheme_for("bf16")


def weights_for(resolved: Resolved, req: PlanRequest) -> WeightEstimate:
    """The target's weights on one GPU, with a speculative draft's beside them where the plan holds one."""
    found = _target_weights(resolved, req)
    draft = int(resolved.meta.get("draft_bytes") or 0)
    return WeightEstimate(found.bytes + draft, f"{found.method} + the draft's") if draft else found


def _target_weights(resolved: Resolved, req: PlanRequest) -> WeightEstimate:
    if req.weights_bytes is not None:
        return WeightEstimate(req.weights_bytes, "given with --weights")
    scheme = scheme_of(resolved, req)
    known = resolved.meta.get("checkpoints", {}).get(scheme.name)
    if known:
        return WeightEstimate(int(known["gib"] * GIB / req.tp), f"checkpoint size: {known['source']}")
    if resolved.weights_bytes is not None and not req.quant:
        return WeightEstimate(resolved.weights_bytes // req.tp, resolved.weights_source)
    return estimate_weights(resolved.spec, scheme, tp=req.tp)


def _speed(resolved: Resolved, weights: WeightEstimate, req: PlanRequest, most_streams: float,
           fits: bool) -> SpeedPrediction | None:  # fmt: skip
    """The speed model at the plan's concurrency and context (plan/speed.py), up to ``most_streams`` (what the
    engine runs at once: :func:`_streams_held`); None without a card's peaks, and where the plan does not fit (no
    speed is predicted for what cannot run)."""
    consts = req.speed_constants
    if consts is None and req.bandwidth_gbs and req.tflops:
        consts = Constants(req.bandwidth_gbs, req.tflops)
    if consts is None or not fits:
        return None
    work = workload(resolved.spec, weights, scheme_of(resolved, req), kv_dtype_bytes(req.kv_dtype), req.tp)
    return predict(work, consts, concurrency=req.concurrency, length=req.context, prompt=req.prompt_tokens,
                   budget=req.max_num_batched_tokens, most_streams=most_streams)  # fmt: skip


def _streams_held(req: PlanRequest, at_chosen: float, at_most: float | None) -> float:
    """The most streams the planned engine runs at once: what its KV cache holds (at the utilisation the flags
    give, else at the most allowed) and no more than its own limit (vLLM's max_num_seqs, llama-server's slots)."""
    fixed = req.gpu_memory_utilization or req.kv_pool_bytes or req.engine == "llamacpp"
    held = at_chosen if fixed or at_most is None else at_most
    limit = req.max_num_seqs or (req.concurrency if req.engine == "llamacpp" else None)
    return min(held, limit) if limit else held


def check_engine(engine: str) -> None:
    if engine not in PLAN_ENGINES:
        raise UsageError(f"unknown engine {engine!r}{meant(engine, PLAN_ENGINES)}", hint=", ".join(PLAN_ENGINES))


def _capacity(resolved: Resolved, req: PlanRequest, pool: int) -> Capacity:
    spec, kvb = resolved.spec, kv_dtype_bytes(req.kv_dtype)
    if req.engine in ("vllm", "vllm-cpu"):
        return vllm_capacity(spec, _vllm_opts(req, resolved), pool, req.engine)
    if req.engine == "sglang":
        return sglang_capacity(spec, req.context, kvb, pool, tp=req.tp)
    if req.engine == "llamacpp":
        return llamacpp_capacity(spec, req.context * req.concurrency, req.concurrency, kvb, pool, **_llama(req))
    check_engine(req.engine)
    raise AssertionError(f"no capacity rule for {req.engine!r}")


def _util_step(value: float, *, up: bool) -> float:
    return (math.ceil(value / UTIL_STEP - 1e-9) if up else math.floor(value / UTIL_STEP + 1e-9)) * UTIL_STEP


def _mamba_cache_mode(resolved: Resolved, req: PlanRequest) -> MambaCacheMode:
    """vLLM's MambaModelConfig: prefix caching on a hybrid keeps every block's state ('all') where
    the model supports it, else two ('align'); off (the default for hybrids), one."""
    if not req.enable_prefix_caching or not any(layer.kind in RECURRENT for layer in resolved.spec.layers):
        return "none"
    return "all" if resolved.spec.model_type in MAMBA_PREFIX_ALL else "align"


def _vllm_opts(req: PlanRequest, resolved: Resolved | None = None) -> VllmOptions:
    return VllmOptions(
        max_model_len=req.context,
        kv_dtype_bytes=kv_dtype_bytes(req.kv_dtype),
        block_size=req.block_size,
        max_num_batched_tokens=req.max_num_batched_tokens,
        tp=req.tp,
        mamba_cache_dtype=req.mamba_cache_dtype,
        mamba_ssm_cache_dtype=req.mamba_ssm_cache_dtype,
        mamba_cache_mode=_mamba_cache_mode(resolved, req) if resolved else "none",
        hybrid_kv_cache_manager=req.hybrid_kv_cache_manager,
    )


def compare_with(resolved: Resolved, req: PlanRequest, plan: Plan, reported: Reported) -> Comparison:
    """Set the plan beside what a running engine reported about itself."""
    resolved, _ = fold_draft(resolved, req.engine, req.engine_args)
    if reported.engine == "llamacpp":  # the cache is sized by the flags alone: cells and bytes
        cap = llamacpp_capacity(resolved.spec, req.context * req.concurrency, req.concurrency,
                                kv_dtype_bytes(req.kv_dtype), 0, ubatch=reported.ubatch or LLAMACPP_UBATCH)  # fmt: skip
        kv_bytes = cap.bytes_per_sequence * req.concurrency
        return Comparison(reported, cap.tokens, kv_bytes, cap.tokens, 1)
    if reported.max_model_len:
        req = replace(req, context=reported.max_model_len)
    if reported.block_size:
        req = replace(req, block_size=reported.block_size)
    layout = vllm_layout(resolved.spec, _vllm_opts(req, resolved))
    same_pool: int | None = None
    if reported.available_bytes is not None:
        same_pool = layout.capacity_tokens(reported.available_bytes)
    elif reported.num_blocks is not None:
        same_pool = int(reported.num_blocks / layout.blocks_per_request * layout.max_model_len)
    return Comparison(reported, same_pool, plan.kv_pool_bytes, plan.capacity.tokens, layout.groups[0].block_size)


def _fraction_base(req: PlanRequest, cotenants: int) -> int:
    """What the memory setting is a fraction of: vLLM's gpu_memory_utilization of the total CUDA reports
    (a little under nvidia-smi's), SGLang's mem_fraction_static of the memory free when it starts."""
    if req.engine == "sglang":
        return req.gpu_bytes - cotenants
    return req.visible_bytes if req.engine == "vllm" else req.gpu_bytes


def engine_shape(resolved: Resolved, req: PlanRequest) -> EngineShape:
    shape = EngineShape(
        max_num_batched_tokens=req.max_num_batched_tokens,
        max_num_seqs=req.seqs_limit,
        enforce_eager=req.enforce_eager,
        tp=req.tp,
        quant=scheme_of(resolved, req).name,
    )
    return with_flags(shape, req.engine_args) if req.engine == "vllm" else shape


def _overhead(resolved: Resolved, req: PlanRequest) -> Overhead:
    """Memory besides weights and KV inside the engine's share: vLLM's profiler, modelled; SGLang keeps
    activations outside mem_fraction_static; llama.cpp's compute buffers."""
    if req.engine == "vllm":
        return vllm_overhead(resolved.spec, engine_shape(resolved, req))
    if req.engine == "vllm-cpu":
        return Overhead(0, 0, 0, "a fixed KV space (VLLM_CPU_KVCACHE_SPACE)")
    if req.engine == "sglang":
        return Overhead(0, 0, 0, "SGLang keeps activations outside mem_fraction_static")
    shape = _llama(req)
    ubatch = shape.get("ubatch", LLAMACPP_UBATCH)
    compute = llamacpp_compute_bytes(resolved.spec, req.context * req.concurrency, req.concurrency, ubatch,
                                     unified=shape.get("unified", False))  # fmt: skip
    return Overhead(compute, 0, 0, f"llama.cpp's compute buffer (flash attention, -ub {ubatch})")


def _llama(req: PlanRequest) -> dict[str, Any]:
    return cache_flags(req.engine_args) if req.engine == "llamacpp" else {}


def make_plan(resolved: Resolved, req: PlanRequest) -> Plan:
    resolved, draft_note = fold_draft(resolved, req.engine, req.engine_args)
    spec = resolved.spec
    check_quantization(spec.quantization, req.engine_args.quantization if req.engine_args else None)
    if req.engine == "llamacpp":
        check_offload(req.engine_args, len(spec.layers))
    req, defaults = with_defaults(req, spec.max_position)
    check_context(spec.name, spec.max_position, req)
    weights = weights_for(resolved, req)
    engine_overhead = _overhead(resolved, req)
    overhead = engine_overhead.total
    cotenants = sum(req.alongside.values())
    base = _fraction_base(req, cotenants)
    util_max = _util_step((req.gpu_bytes - cotenants - req.headroom) / base, up=False)
    probe = _capacity(resolved, req, GIB)
    need_pool = probe.bytes_per_sequence * req.concurrency
    util_min_raw = (weights.bytes + overhead + need_pool) / base
    util_min = _util_step(util_min_raw, up=True) if util_min_raw <= 1 else None
    chosen = req.gpu_memory_utilization or (util_min if util_min is not None and util_min <= util_max else util_max)
    pool = req.kv_pool_bytes or max(0, int(chosen * base) - weights.bytes - overhead)
    if req.engine == "llamacpp":  # its KV buffer is -c cells, allocated whole: no fraction to choose
        pool = req.kv_pool_bytes or need_pool
    capacity = _capacity(resolved, req, pool)
    fits, reasons = _judge(req, weights, overhead, util_min, util_max, chosen, capacity)
    buffers = Buffers(weights.bytes, pool, overhead, req.gpu_bytes - cotenants - req.headroom)
    if req.engine == "llamacpp":
        fits, reasons = buffers.fits, llamacpp_terms.reasons(buffers, req.context, req.concurrency)
    most = None  # what the card holds at the most the co-tenants allow, where that is more than chosen
    if not req.kv_pool_bytes and util_max > chosen + 1e-9:
        most = _capacity(resolved, req, max(0, int(util_max * base) - weights.bytes - overhead)).max_sequences
    return Plan(
        model=spec.name,
        gpu=req.gpu_name,
        engine=req.engine,
        fits=fits,
        verdict=llamacpp_terms.verdict(buffers, capacity, req.context, req.concurrency, req.gpu_name)
        if req.engine == "llamacpp"
        else _verdict(req, fits, capacity, chosen, (most, util_max)),
        reasons=reasons,
        weights=weights,
        overhead_bytes=overhead,
        overhead_detail=engine_overhead.detail,
        overhead_parts={
            "activation": engine_overhead.activation,
            "non_torch": engine_overhead.non_torch,
            "cudagraphs": engine_overhead.cudagraphs,
        },
        cotenant_bytes=cotenants,
        headroom_bytes=req.headroom,
        gpu_bytes=req.gpu_bytes,
        util_min=util_min,
        util_max=util_max,
        util_chosen=chosen,
        kv_pool_bytes=pool,
        capacity=capacity,
        kv_bytes_per_token=spec.kv_bytes_per_token(kv_dtype_bytes(req.kv_dtype)),
        state_bytes_per_sequence=spec.state_bytes_per_sequence(),
        total_params=spec.total_params,
        active_params=spec.active_params,
        decode=decode_ceiling(spec, weights, req),
        speed=_speed(resolved, weights, req, _streams_held(req, capacity.max_sequences, most), fits),
        command=command_line(resolved, req, chosen),
        notes=plan_notes(resolved, req, weights, draft_note) + [defaults_note(defaults, req.engine)] * bool(defaults),
        defaults=defaults,
    )


def _judge(
    req: PlanRequest,
    weights: WeightEstimate,
    overhead: int,
    util_min: float | None,
    util_max: float,
    chosen: float,
    capacity: Capacity,
) -> tuple[bool, list[str]]:
    reasons: list[str] = []
    gib = req.gpu_bytes / GIB
    if weights.bytes + overhead > chosen * req.gpu_bytes:
        reasons.append(
            f"weights {weights.gib:.1f} GiB + engine overhead {overhead / GIB:.1f} GiB exceed "
            f"{chosen:.2f} x {gib:.1f} GiB{' per GPU' if req.tp > 1 else ''}"
        )
    if util_min is None:
        reasons.append(f"{req.concurrency} x {req.context:,} tokens need more than the whole GPU")
    elif util_min > util_max:
        reasons.append(
            f"holding {req.concurrency} x {req.context:,} tokens needs gpu_memory_utilization >= "
            f"{util_min:.2f}, but the co-tenants and headroom leave at most {util_max:.2f}"
        )
    if req.engine.startswith("vllm") and req.seqs_limit < req.concurrency:
        reasons.append(f"the engine runs at most {req.seqs_limit:,} sequences at once (max_num_seqs), "
                       f"fewer than {req.concurrency}")  # fmt: skip
    if capacity.max_sequences < req.concurrency:
        reasons.append(
            f"at {chosen:.2f} the KV pool holds {capacity.max_sequences:.2f} sequences of "
            f"{req.context:,} tokens, fewer than {req.concurrency}"
        )
    if req.gpu_memory_utilization and req.gpu_memory_utilization > util_max:
        reasons.append(
            f"gpu_memory_utilization {req.gpu_memory_utilization:.2f} leaves the co-tenants less "
            f"than they need (at most {util_max:.2f})"
        )
    return not reasons, reasons


def _verdict(req: PlanRequest, fits: bool, capacity: Capacity, chosen: float, most: tuple[float | None, float]) -> str:
    """What the card holds at the utilisation chosen and, where it is more, at the most the co-tenants allow."""
    held = _tenths(capacity.max_sequences)
    ctx = f"{req.context // 1024}K" if req.context % 1024 == 0 else f"{req.context:,}"
    head = "fits" if fits else f"does not fit {req.concurrency}"
    line = f"{head}: holds {held:g} session{'s' if held != 1 else ''} of {ctx} on {req.gpu_name}"
    line += (f" in a {req.kv_pool_bytes / GIB:.2f} GiB KV pool" if req.kv_pool_bytes
             else f" at gpu_memory_utilization {chosen:.2f}")  # fmt: skip
    sessions, util_max = most
    if sessions is not None and _tenths(sessions) > held:
        allow = "the co-tenants allow" if req.alongside else "this card allows"
        line += f" ({_tenths(sessions):g} at {util_max:.2f}, the most {allow})"
    return line


def _tenths(sessions: float) -> float:
    return math.floor(sessions * 10 + 1e-9) / 10
