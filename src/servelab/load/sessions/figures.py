"""A session step's figures from its raw turn records: per turn, per session, TTFT against prompt length and the
cache's share over time. What the engine served from its cache is what it said (``cached_tokens``), never
inferred; the engine's own counters (preemptions, KV usage, prefix hits) come beside them from /metrics."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Protocol

from servelab.core.records import Labels, RequestRecord
from servelab.core.results.base import Scalar
from servelab.core.results.sessions import SessionFigures, SessionOutcome, TurnFigures
from servelab.core.stats import percentile
from servelab.core.summary import ttft_ms

ENGINE_FIGURES = ("kv_usage_max", "waiting_max", "preemptions", "prefix_hit_rate")


class Judge(Protocol):
    """An SLO: whether one request met it."""

    def good(self, record: RequestRecord) -> bool: ...


def step_labels(record: RequestRecord) -> Labels:
    """A step's labels from one of its records: a turn's session, turn and phase are the turn's, not the step's."""
    return replace(record.labels, session=None, turn=None, phase=None) if record.labels.session is not None \
        else record.labels  # fmt: skip


def _pct(values: Sequence[float], q: float) -> float | None:
    return None if not values else percentile(values, q)


def hit_share(records: Sequence[RequestRecord]) -> float | None:
    """Cached over prompt tokens, over the records that reported both (None where none did)."""
    both = [r for r in records if r.ok and r.cached_tokens is not None and r.prompt_tokens]
    prompt = sum(r.prompt_tokens or 0 for r in both)
    return sum(r.cached_tokens or 0 for r in both) / prompt if prompt else None


def _ttfts(records: Sequence[RequestRecord]) -> list[float]:
    return [t for r in records if r.ok and (t := ttft_ms(r)) is not None]


def per_turn(records: Sequence[RequestRecord]) -> list[TurnFigures]:
    turns = sorted({r.labels.turn for r in records if r.labels.turn is not None})
    out = []
    for turn in turns:
        mine = [r for r in records if r.labels.turn == turn]
        ttfts, ok = _ttfts(mine), [r for r in mine if r.ok]
        prompts = [float(r.prompt_tokens) for r in ok if r.prompt_tokens is not None]
        cached = [float(r.cached_tokens) for r in ok if r.cached_tokens is not None]
        out.append(TurnFigures(turn=turn, requests=len(mine), ok=len(ok), ttft_ms_p50=_pct(ttfts, 50),
                               ttft_ms_p95=_pct(ttfts, 95), prompt_tokens_p50=_pct(prompts, 50),
                               cached_tokens_p50=_pct(cached, 50), hit_share=hit_share(mine)))  # fmt: skip
    return out


def per_session(records: Sequence[RequestRecord], slo: Judge | None) -> list[SessionOutcome]:
    out = []
    for session in sorted({r.labels.session for r in records if r.labels.session is not None}):
        mine = [r for r in records if r.labels.session == session]
        starts = [r.scheduled_ns for r in mine if r.scheduled_ns is not None]
        ends = [r.end_ns for r in mine if r.end_ns is not None]
        duration = (max(ends) - min(starts)) / 1e9 if starts and ends else None
        out.append(SessionOutcome(session=session, turns=len(mine), ok=sum(r.ok for r in mine),
                                  compactions=sum(r.labels.phase == "compacted" for r in mine), duration_s=duration,
                                  within_slo=None if slo is None else sum(slo.good(r) for r in mine)))  # fmt: skip
    return out


def over_time(records: Sequence[RequestRecord]) -> list[tuple[float, float]]:
    """Each answered turn's cached share of its prompt, at its end (seconds from the step's first send)."""
    ok = [r for r in records if r.ok and r.end_ns is not None and r.prompt_tokens and r.cached_tokens is not None]
    t0 = min((r.sent_ns for r in records if r.sent_ns is not None), default=0)
    return sorted((((r.end_ns or 0) - t0) / 1e9, (r.cached_tokens or 0) / (r.prompt_tokens or 1)) for r in ok)


def session_figures(
    records: Sequence[RequestRecord],
    derived: Mapping[str, Scalar],
    slo: Judge | None = None,
) -> SessionFigures:
    """The step's figures; ``derived`` is the step's own /metrics figures, ``slo`` the goodput SLO."""
    turns = [r for r in records if r.labels.turn is not None]
    first = [r for r in turns if r.labels.turn == 1]
    later = [r for r in turns if (r.labels.turn or 0) > 1 and r.labels.phase != "compacted"]
    sessions = per_session(turns, slo)
    durations = [s.duration_s for s in sessions if s.duration_s is not None and s.ok == s.turns]
    pairs = [(r.prompt_tokens, t) for r in turns if r.ok and r.prompt_tokens and (t := ttft_ms(r)) is not None]
    return SessionFigures(
        sessions=len(sessions),
        turns=len(turns),
        ok=sum(r.ok for r in turns),
        compactions=sum(r.labels.phase == "compacted" for r in turns),
        hit_share=hit_share(turns),
        first_turn_ttft_ms_p50=_pct(_ttfts(first), 50),
        later_turn_ttft_ms_p50=_pct(_ttfts(later), 50),
        turn_ttft_ms_p95=_pct(_ttfts(turns), 95),
        duration_s_p50=_pct(durations, 50),
        per_turn=per_turn(turns),
        per_session=sessions,
        ttft_vs_prompt=sorted(pairs),
        hit_share_over_time=over_time(turns),
        engine={k: _finite(derived.get(k)) for k in ENGINE_FIGURES},
    )


def _finite(value: Scalar) -> Scalar:
    return None if isinstance(value, float) and not math.isfinite(value) else value
