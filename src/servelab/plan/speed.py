"""Predicted speed: decode tok/s per stream and in aggregate at concurrency c, prefill time, TTFT behind a queue.

One engine step serves every running stream one token. Its time is a fixed step cost plus the larger of the
bytes it reads over the card's bandwidth and the FLOPs it does over the card's compute, each at an efficiency
(``t = t0 + max(bytes / (BW x e_bw), flops / (F x e_flop))``):

- **bytes a decode step reads**: the weights every token uses (attention, dense MLPs, shared experts, norms and
  the lm_head; the embedding table only by rows, so not counted when it is not tied), the routed experts a batch
  of c touches (``E (1 - (1 - k/E)^c)`` distinct experts per MoE layer, routing taken as uniform), and each
  stream's KV at its length (sliding layers up to their window) and recurrent state.
- **FLOPs**: ``2 x`` the active parameters a token (the embedding lookup left out) plus attention over the
  stream's length (``4 x hidden x length`` per attention layer), per stream.
- **prefill** of P tokens: steps of at most ``max_num_batched_tokens`` tokens, each reading the weights once
  (every expert its tokens touch) and doing ``2 x active x n`` FLOPs plus attention over the prompt so far.
- **TTFT behind a queue**: c prompts arriving together are prefilled in the same token budget; the last one's
  first token comes after all c x P tokens.

Per-stream tok/s at c is ``1 / t``, aggregate ``c / t``: per stream never rises with c, aggregate never falls.
Speculative decoding, preemption and the prefill steps of other streams are not modelled. The constants
default from the GPU table (plan/gpus.py) and are fitted to measured runs with ``servelab plan --fit``
(plan/fit.py); the evidence for the defaults is in docs/plan-speed.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from servelab.plan.ckpt_quant import QuantScheme
from servelab.plan.quant import WeightEstimate, estimate_weights
from servelab.plan.spec import ModelSpec

STEP_OVERHEAD_S = 1.5e-3  # vLLM's fixed cost a step (SmolLM2-135M on the H200: 639 tok/s, 0.3 GB a step)
BANDWIDTH_EFFICIENCY = 0.80  # of the vendor's peak
FLOP_EFFICIENCY = 0.50  # of the vendor's dense BF16 peak


@dataclass(frozen=True, slots=True)
class Constants:
    """A card's speed constants: the peaks, the efficiencies reached, and the fixed cost of a step."""

    bandwidth_gbs: float
    tflops: float
    bandwidth_efficiency: float = BANDWIDTH_EFFICIENCY
    flop_efficiency: float = FLOP_EFFICIENCY
    step_overhead_s: float = STEP_OVERHEAD_S
    source: str = "defaults from the GPU table"

    def step_s(self, nbytes: float, flops: float) -> tuple[float, str]:
        """Seconds a step takes, and what bounds it ("memory" or "compute")."""
        memory = nbytes / (self.bandwidth_gbs * 1e9 * self.bandwidth_efficiency)
        compute = flops / (self.tflops * 1e12 * self.flop_efficiency)
        return self.step_overhead_s + max(memory, compute), "memory" if memory >= compute else "compute"


@dataclass(frozen=True, slots=True)
class Workload:
    """What a step is made of, per GPU: the bytes every step reads, one routed expert's bytes, and per token."""

    dense_bytes: float  # read every step whatever the batch
    expert_bytes: float  # one routed expert in one MoE layer
    moe_layers: int
    experts: int
    experts_per_token: int
    kv_bytes_per_token: float  # growing layers; sliding ones added by kv_bytes
    state_bytes: float  # recurrent state a stream
    flops_per_token: float  # 2 x active parameters (matmuls)
    attention_flops_per_position: float  # 4 x hidden per attention layer, per token per position attended
    sliding: tuple[tuple[float, int], ...] = ()  # (KV bytes per token, window) of each sliding layer
    spec_name: str = ""

    def experts_touched(self, tokens: int) -> float:
        """Distinct experts a batch of ``tokens`` tokens reads in one MoE layer (uniform routing)."""
        if not self.experts:
            return 0.0
        return self.experts * (1 - (1 - self.experts_per_token / self.experts) ** tokens)

    def kv_bytes(self, length: int) -> float:
        """KV bytes one stream of ``length`` tokens holds (and a decode step reads)."""
        return self.kv_bytes_per_token * length + sum(b * min(length, w) for b, w in self.sliding)

    def weight_bytes(self, tokens: int) -> float:
        return self.dense_bytes + self.moe_layers * self.experts_touched(tokens) * self.expert_bytes

    def decode_step(self, streams: int, length: int) -> tuple[float, float]:
        """(bytes, FLOPs) of one decode step of ``streams`` streams, each ``length`` tokens long."""
        nbytes = self.weight_bytes(streams) + streams * (self.kv_bytes(length) + self.state_bytes)
        flops = streams * (self.flops_per_token + self.attention_flops_per_position * length)
        return nbytes, flops

    def prefill_step(self, tokens: int, attended: float) -> tuple[float, float]:
        """(bytes, FLOPs) of a step prefilling ``tokens`` tokens that attend ``attended`` positions on average."""
        flops = tokens * (self.flops_per_token + self.attention_flops_per_position * attended)
        return self.weight_bytes(tokens) + tokens * self.kv_bytes_per_token, flops


def _role_bytes(spec: ModelSpec, scheme: QuantScheme, tp: int, model_bytes: int = 2) -> tuple[float, float]:
    """(routed experts, embedding table) bytes on one GPU as the estimate weighs them."""
    share = scheme.share_quantized("moe_routed")
    routed = spec.params.moe_routed * (share * scheme.bytes_per_weight + (1 - share) * model_bytes) / tp
    embedding = spec.params.embedding * model_bytes / tp if spec.params.lm_head else 0.0
    return routed, embedding


def workload(spec: ModelSpec, weights: WeightEstimate, scheme: QuantScheme, kv_dtype_bytes: float,
             tp: int = 1) -> Workload:  # fmt: skip
    """The model's step, per GPU: the estimate's split of the weights by role, scaled to the weights planned."""
    estimate = estimate_weights(spec, scheme, tp=tp).bytes
    scale = weights.bytes / estimate if estimate else 1.0
    routed, embedding = (b * scale for b in _role_bytes(spec, scheme, tp))
    moe = spec.moe
    sliding = tuple((layer.kv_bytes_per_token(kv_dtype_bytes, tp), layer.window) for layer in spec.layers
                    if layer.kind in ("sliding", "chunked") and layer.window)  # fmt: skip
    growing = sum(layer.kv_bytes_per_token(kv_dtype_bytes, tp) for layer in spec.layers
                  if not (layer.kind in ("sliding", "chunked") and layer.window))  # fmt: skip
    attention_layers = sum(1 for layer in spec.layers if layer.kind in ("full", "sliding", "chunked", "mla"))
    active = spec.active_params - (spec.params.embedding if spec.params.lm_head else 0)
    return Workload(
        dense_bytes=weights.bytes - routed - embedding,
        expert_bytes=routed / (moe.num_experts * moe.moe_layers) if moe else 0.0,
        moe_layers=moe.moe_layers if moe else 0,
        experts=moe.num_experts if moe else 0,
        experts_per_token=moe.experts_per_token if moe else 0,
        kv_bytes_per_token=growing,
        state_bytes=spec.state_bytes_per_sequence(tp=tp),
        flops_per_token=2.0 * active / tp,
        attention_flops_per_position=4.0 * spec.hidden_size * attention_layers / tp,
        sliding=sliding,
        spec_name=spec.name,
    )


@dataclass(frozen=True, slots=True)
class DecodePoint:
    concurrency: int
    length: int  # tokens each stream holds
    bytes_per_step: float
    flops_per_step: float
    step_ms: float
    tok_s_per_stream: float
    tok_s_aggregate: float
    bound: str


def decode_point(work: Workload, consts: Constants, concurrency: int, length: int) -> DecodePoint:
    nbytes, flops = work.decode_step(concurrency, length)
    seconds, bound = consts.step_s(nbytes, flops)
    return DecodePoint(concurrency, length, nbytes, flops, seconds * 1e3, 1 / seconds, concurrency / seconds, bound)


MAX_STEPS = 4096  # at most this many step costs are computed for one prefill


def prefill_s(work: Workload, consts: Constants, prompt: int, budget: int, prompts: int = 1) -> float:
    """Seconds to prefill ``prompts`` prompts of ``prompt`` tokens in steps of at most ``budget`` tokens. The steps
    repeat with a period of lcm(prompt, budget) tokens: a prefill of more than MAX_STEPS steps is its whole periods
    (one priced step by step) and the rest priced step by step, exactly; only where one period is itself longer
    than MAX_STEPS are steps priced in groups, each group at its middle step."""
    total = prompts * prompt
    if ceil_div(total, budget) <= MAX_STEPS:
        return _steps_s(work, consts, prompt, budget, total, 1)
    period = math.lcm(prompt, budget)
    if period // budget <= MAX_STEPS:
        whole, rest = divmod(total, period)
        return whole * _steps_s(work, consts, prompt, budget, period, 1) + _steps_s(work, consts, prompt, budget,
                                                                                 rest, 1)  # fmt: skip
    group = ceil_div(ceil_div(total, budget), MAX_STEPS)
    return _steps_s(work, consts, prompt, budget, total, group)


def _steps_s(work: Workload, consts: Constants, prompt: int, budget: int, total: int, group: int) -> float:
    """The steps of ``total`` tokens from a prompt's start, ``group`` equal steps priced at their middle one."""
    done, seconds = 0, 0.0
    while done < total:
        n = min(budget, total - done)
        k = max(1, min(group, (total - done) // n))
        start = done + (k // 2) * n
        within = (start % prompt) + n / 2 if n < prompt else prompt / 2  # positions attended, on average
        seconds += k * consts.step_s(*work.prefill_step(n, min(within, prompt)))[0]
        done += k * n
    return seconds


@dataclass(frozen=True, slots=True)
class SpeedPrediction:
    constants: Constants
    length: int  # the KV length each stream is read at
    points: list[DecodePoint]
    prompt_tokens: int
    prefill_ms: float  # one prompt alone
    concurrency: int
    ttft_last_ms: float  # the last of ``concurrency`` prompts arriving together
    notes: list[str] = field(default_factory=list)


LEVELS = (1, 4, 16, 64)


def predict(work: Workload, consts: Constants, *, concurrency: int, length: int, prompt: int, budget: int,
            most_streams: float | None = None) -> SpeedPrediction:  # fmt: skip
    """Decode at ``concurrency`` and at 1, 4, 16, 64 streams where the KV cache holds them at ``length`` tokens a
    stream (``most_streams``); a prompt's prefill alone and behind ``concurrency``, the prompt within ``length``."""
    notes = []
    beyond = [c for c in LEVELS if most_streams is not None and c > most_streams and c != concurrency]
    if beyond:
        notes.append(f"{', '.join(map(str, beyond))} streams: more than the {most_streams:,.1f} sequences of "
                     f"{length:,} tokens the engine runs at once (its KV cache, its sequence limit), so not "
                     "predicted")  # fmt: skip
    if prompt > length:
        notes.append(f"a prompt of {prompt:,} tokens is past the context of {length:,}: predicted at {length:,} "
                     "(the engine refuses a longer one)")  # fmt: skip
        prompt = length
    levels = sorted({*(c for c in LEVELS if c not in beyond), concurrency})
    points = [decode_point(work, consts, c, length) for c in levels]
    alone = prefill_s(work, consts, prompt, budget)
    last = prefill_s(work, consts, prompt, budget, prompts=concurrency)
    return SpeedPrediction(consts, length, points, prompt, alone * 1e3, concurrency, last * 1e3, notes)


def ceil_div(a: int, b: int) -> int:
    return math.ceil(a / b)
