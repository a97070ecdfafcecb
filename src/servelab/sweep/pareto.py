"""The sweep's answer: the trade-off between each user's speed and the GPU's, and the best configuration that keeps
the SLO within the co-tenants' memory.

A candidate is one measured step of one point: its median per-stream tok/s (per user) and its aggregate tok/s over
the GPUs the point uses (``--tensor-parallel-size``/``-tp``; 1 otherwise). The Pareto front is every candidate no
other beats on both, the rule kept by construction: none on the front is dominated, and every candidate off it is
dominated by one on it. The best under the SLO is the highest tok/s per GPU among the candidates whose share of
requests within the SLO reaches its attainment and whose plan fits beside the co-tenants (it need not be on the
front: a faster step that misses the SLO can dominate it) (a point the plan
refused but that ran with ``--try-all`` is not named best: it does not leave the co-tenants their memory).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from servelab.core.results.sweep import SweepPoint, SweepRun

_TP_FLAGS = ("--tensor-parallel-size", "-tp", "--tp-size", "--tp")


@dataclass(frozen=True, slots=True)
class Candidate:
    point: int
    key: str
    command: str
    step: str
    concurrency: int | None
    per_user: float  # median per-stream tok/s
    per_gpu: float  # aggregate tok/s / GPUs
    ttft_p95_ms: float | None
    slo_attained: float | None
    fits: bool | None  # the plan's verdict beside the co-tenants
    ttft_n: int = 0  # the TTFT samples the p95 rests on


def gpus(args: Sequence[str]) -> int:
    """The GPUs a point's flags spread it over (tensor parallel), 1 when not given or unreadable."""
    for i, word in enumerate(args):
        flag, eq, inline = word.partition("=")
        if flag in _TP_FLAGS:
            value = inline if eq else (args[i + 1] if i + 1 < len(args) else "")
            return int(value) if value.isdigit() and int(value) > 0 else 1
    return 1


def candidates(result: SweepRun) -> list[Candidate]:
    return [c for p in result.points for c in _of(p)]


def _of(point: SweepPoint) -> list[Candidate]:
    n = gpus(point.args)
    return [
        Candidate(point.index, point.key, point.command, f.scenario, f.concurrency, f.tok_s_per_user,
                  f.aggregate_tok_s / n, f.ttft_p95_ms, f.slo_attained, point.plan.fits if point.plan else None,
                  f.ttft_n)
        for f in point.figures
        if f.tok_s_per_user is not None and f.aggregate_tok_s is not None
    ]  # fmt: skip


def dominates(a: Candidate, b: Candidate) -> bool:
    return a.per_user >= b.per_user and a.per_gpu >= b.per_gpu and (a.per_user > b.per_user or a.per_gpu > b.per_gpu)


def pareto_front(found: Sequence[Candidate]) -> list[Candidate]:
    """The candidates no other dominates, by tok/s per user (highest first)."""
    front = [c for c in found if not any(dominates(o, c) for o in found)]
    return sorted(front, key=lambda c: (-c.per_user, -c.per_gpu, c.point))


def best_under(found: Sequence[Candidate], attainment: float | None) -> Candidate | None:
    """The highest tok/s per GPU among candidates within the SLO (``attainment`` None: no SLO) whose plan fits."""
    kept = [c for c in found if c.fits is not False and _within(c, attainment)]
    return max(kept, key=lambda c: (c.per_gpu, c.per_user, -c.point), default=None)


def _within(c: Candidate, attainment: float | None) -> bool:
    return attainment is None or (c.slo_attained is not None and c.slo_attained >= attainment)
