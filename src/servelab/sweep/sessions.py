"""Session capacity at each point, beside the plan's: the most concurrent sessions that kept the sweep's SLO, and
how many sessions of the size they reached the planned and the logged KV cache hold.

A session scenario's levels are session counts. A point *held* N sessions when every level it measured up to N met
the SLO's attainment (judged on the turns the SLO names: all, or only those past each session's first); a level
that failed ends the count there, whatever a higher level did. The size a session reached is the most tokens one of
its turns held (prompt and reply), over the steps that held; the plan's count is its KV tokens over that size (the
engine's KV size is counted in tokens of a full-attention request: a sliding-window layer's share is already in it),
the log's the same with the engine's own KV size.
"""

from __future__ import annotations

from dataclasses import dataclass

from servelab.core.results.sweep import PointFigures, SweepPoint, SweepRun


@dataclass(frozen=True, slots=True)
class SessionsHeld:
    point: int
    scenario: str
    held: int | None  # None: even the lowest level measured missed the SLO
    tried: list[tuple[int, bool]]  # (sessions, met) per level, in order
    peak_tokens: int | None
    plan_sessions: float | None  # the planned KV cache over the session size
    logged_sessions: float | None


def sessions_held(result: SweepRun) -> list[SessionsHeld]:
    """Every point's session scenarios, judged against the sweep's SLO (none without an SLO)."""
    attainment = result.slo.get("attainment") if result.slo else None
    if attainment is None:
        return []
    return [held for p in result.points for held in _of(p, attainment)]


def _of(point: SweepPoint, attainment: float) -> list[SessionsHeld]:
    steps: dict[str, list[PointFigures]] = {}
    for f in point.figures:
        if f.sessions and f.concurrency is not None:
            steps.setdefault(f.scenario.rpartition("@")[0] or f.scenario, []).append(f)
    return [_judged(point, name, sorted(found, key=lambda f: f.concurrency or 0), attainment)
            for name, found in steps.items()]  # fmt: skip


def _judged(point: SweepPoint, name: str, steps: list[PointFigures], attainment: float) -> SessionsHeld:
    tried = [(f.concurrency or 0, f.slo_attained is not None and f.slo_attained >= attainment) for f in steps]
    held, sizes = None, []
    for f, (level, met) in zip(steps, tried, strict=True):
        if not met:
            break
        held = level
        if f.peak_tokens is not None:
            sizes.append(f.peak_tokens)
    peak = max(sizes) if sizes else max((f.peak_tokens for f in steps if f.peak_tokens is not None), default=None)
    planned = point.plan.kv_tokens if point.plan else None
    logged = point.logged.kv_tokens if point.logged else None
    return SessionsHeld(point.index, name, held, tried, peak, _over(planned, peak), _over(logged, peak))


def _over(kv_tokens: int | None, peak: int | None) -> float | None:
    return round(kv_tokens / peak, 2) if kv_tokens is not None and peak else None
