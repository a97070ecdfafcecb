"""A session step's figures: per turn, per session, and the cache's share of the prompt tokens over time."""

from __future__ import annotations

from pydantic import Field

from servelab.core.results.base import Model, Scalar


class TurnFigures(Model):
    """Every session's n-th turn together."""

    turn: int  # from 1
    requests: int
    ok: int
    ttft_ms_p50: float | None
    ttft_ms_p95: float | None
    prompt_tokens_p50: float | None  # the server's count
    cached_tokens_p50: float | None  # usage.prompt_tokens_details.cached_tokens
    hit_share: float | None  # cached / prompt tokens over the turns that reported both


class SessionOutcome(Model):
    """One session, start to end."""

    session: int
    turns: int  # sent
    ok: int
    compactions: int
    duration_s: float | None  # its first turn's scheduled time to its last answer
    within_slo: int | None  # turns that met the --goodput SLO (None without one)


class SessionFigures(Model):
    """What a session step measured; the /metrics figures are the engine's own over the step."""

    sessions: int
    turns: int
    ok: int
    compactions: int
    hit_share: float | None  # cached / prompt tokens over every turn that reported both
    first_turn_ttft_ms_p50: float | None
    later_turn_ttft_ms_p50: float | None  # turns after the first, compacted ones left out
    turn_ttft_ms_p95: float | None
    duration_s_p50: float | None
    per_turn: list[TurnFigures] = Field(default_factory=list)
    per_session: list[SessionOutcome] = Field(default_factory=list)
    ttft_vs_prompt: list[tuple[int, float]] = Field(default_factory=list)  # (prompt tokens, TTFT ms) per turn
    hit_share_over_time: list[tuple[float, float]] = Field(default_factory=list)  # (s from the step's start, share)
    engine: dict[str, Scalar] = Field(default_factory=dict)  # kv_usage_max, preemptions, prefix_hit_rate, waiting_max
