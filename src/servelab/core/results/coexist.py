"""A coexist run's result: per condition, what the realtime probe's stream did and what a listener heard."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from servelab.core.results.base import Facts, Model, RunResult


class ListenerFigures(Model):
    lookahead_ms: float
    underruns: int
    utterances_with_underrun: int
    stall_ms: float
    stall_ms_per_min: float  # stall per minute of audio
    start_p50_ms: float | None  # scheduled -> playback starts


class LlmFigures(Model):
    """The LLM load's own requests in one condition."""

    requests: int
    ok: int
    errors: dict[str, int]
    ttft_ms: dict[str, float]
    tpot_ms: dict[str, float]
    aggregate_tok_s: float


class ConditionFigures(Model):
    condition: str
    utterances: int
    chunks: int
    errors: int
    ttfa_p50_ms: float | None
    ttfa_p95_ms: float | None
    interval_p50_ms: float | None
    interval_p95_ms: float | None
    interval_p99_ms: float | None
    interval_p99_low_ms: float | None
    interval_p99_high_ms: float | None  # None: too few chunks for an upper bound
    interval_max_ms: float | None
    lag_p99_ms: float | None
    rtf_mean: float | None  # per utterance: scheduled -> last chunk, over its audio (waiting for a late start counts)
    rtf_p95: float | None
    pace_rtf: float | None  # the chunk pace: all intervals over the audio of the chunks they brought (no start wait)
    listeners: list[ListenerFigures] = Field(default_factory=list)
    frame_latency_p99_ms: float | None = None
    min_fps: float | None = None
    llm: LlmFigures | None = None


class CoexistRun(RunResult):
    kind: Literal["coexist"] = "coexist"
    probe: Facts = Field(default_factory=dict)
    sharing: Facts = Field(default_factory=dict)
    conditions: list[ConditionFigures] = Field(default_factory=list)
