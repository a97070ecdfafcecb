"""The single-stream decode ceiling: the bytes one token reads (active weights, state, KV) over the peak bandwidth,
with no efficiency and no step cost; the speed model (plan/speed.py) is the prediction."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from servelab.plan.quant import WeightEstimate, kv_dtype_bytes
from servelab.plan.spec import ModelSpec

if TYPE_CHECKING:
    from servelab.plan.budget import PlanRequest


@dataclass(frozen=True, slots=True)
class DecodeCeiling:
    bytes_per_token_short: int
    bytes_per_token_long: int
    tok_s_short: float | None
    tok_s_long: float | None
    experts_touched: dict[int, float]  # batch size -> expected distinct experts per MoE layer


def _expected_experts(experts: int, per_token: int, batch: int) -> float:
    return experts * (1 - (1 - per_token / experts) ** batch)


def decode_ceiling(spec: ModelSpec, weights: WeightEstimate, req: PlanRequest) -> DecodeCeiling:
    active_share = spec.active_params / spec.total_params
    active_bytes = weights.bytes * active_share
    kv = spec.kv_bytes_per_token(kv_dtype_bytes(req.kv_dtype), context=req.context)
    state = spec.state_bytes_per_sequence()
    short, long = int(active_bytes + state + kv * 1024), int(active_bytes + state + kv * req.context)
    bw = req.bandwidth_gbs * 1e9 if req.bandwidth_gbs else None
    touched = {}
    if spec.moe:
        touched = {b: _expected_experts(spec.moe.num_experts, spec.moe.experts_per_token, b) for b in (1, 4, 16, 64)}
    return DecodeCeiling(short, long, bw / short if bw else None, bw / long if bw else None, touched)
