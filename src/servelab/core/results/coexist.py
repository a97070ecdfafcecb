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
    ahead_min_ms: float | None = None  # the least audio buffered ahead when a chunk arrived (0: it ran dry)
    ahead_p5_ms: float | None = None


class LlmFigures(Model):
    """The LLM load's own requests in one condition."""

    requests: int
    ok: int
    errors: dict[str, int]
    ttft_ms: dict[str, float]  # finished requests and those cut off at the end after their first token
    tpot_ms: dict[str, float]
    aggregate_tok_s: float
    streamed_tok_s: float | None = None  # tokens that arrived over the load's span, cut-off requests included
    prompt_tok_s: float | None = None  # prompt tokens taken in over the load's span (requests with a first token)
    tok_s_share: float | None = None  # the lower of output_share and prompt_share: what the LLM kept of its work
    tok_s_share_low: float | None = None  # its 95% interval over the rounds (None: one round, no interval)
    tok_s_share_high: float | None = None
    rounds_tok_s: list[float] = Field(default_factory=list)  # streamed tok/s of each round (a load window)
    rounds_prompt_tok_s: list[float] = Field(default_factory=list)  # prompt tok/s of each round
    cancelled: int = 0  # requests cut off as planned at the end of a load window: neither failures nor successes
    output_share: float | None = None  # streamed tok/s over the same load's with no probe running (llm:...)
    prompt_share: float | None = None  # prompt tok/s over the same load's with no probe running
    ttft_p50_alone_ms: float | None = None  # that baseline's median TTFT
    cut_before_first_token: int = 0  # requests cut off at the end still waiting for their first token
    failures: dict[str, int] = Field(default_factory=dict)  # why requests failed, most common first
    failure_messages: dict[str, str] = Field(default_factory=dict)  # the server's own words, one per reason

    def cut_off(self) -> int:
        """Requests cut off as planned at the end of a load window (a run stored before version 4: its failures)."""
        return self.cancelled or self.failures.get("cancelled", 0)


class ConditionFigures(Model):
    condition: str
    probe: str = ""  # which probe these figures are of (several run at once); "" for an LLM-only baseline
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
    lag_p99_ms: float | None  # a chunk's arrival after an unbroken playback from the utterance's first chunk
    lateness_p99_ms: float | None = None  # ... from the moment the utterance was due (waiting for a turn counts)
    rtf_mean: float | None  # per utterance: scheduled -> last chunk, over its audio (waiting for a late start counts)
    rtf_p95: float | None
    pace_rtf: float | None  # the chunk pace: all intervals over the audio of the chunks they brought (no start wait)
    listeners: list[ListenerFigures] = Field(default_factory=list)
    samples: dict[str, int] = Field(default_factory=dict)  # what each percentile rests on: interval, lateness, ttfa
    maxima: dict[str, float] = Field(default_factory=dict)  # each one's largest sample (ms): what a p99 from too few is
    frame_latency_p99_ms: float | None = None
    min_fps: float | None = None
    llm: LlmFigures | None = None
    meets: bool | None = None  # against the run's goals (None: nothing to judge, e.g. the probe alone)
    verdict: str | None = None  # which goals held and which did not, with the figures


class CoexistRun(RunResult):
    kind: Literal["coexist"] = "coexist"
    version: int = 4  # 2: listeners carry the audio buffered ahead; several probes; the LLM's share; goals
    # 3: lateness from the due time; the LLM's share is the lower of its output and prompt token rates' shares
    # 4: the LLM's planned cancellations apart from its failures; its share with an interval over the rounds
    goals: dict[str, float] = Field(default_factory=dict)  # what a condition must keep to meet them
    probe: Facts = Field(default_factory=dict)
    sharing: Facts = Field(default_factory=dict)
    conditions: list[ConditionFigures] = Field(default_factory=list)
    reference: str | None = None  # the run whose "alone" and llm: baselines judged this one (a plain server's)

    def request_failures(self) -> list[str]:
        """A condition whose LLM load failed measured the probe beside nothing (or less than asked): say so."""
        out = []
        for c in self.conditions:
            if c.errors:
                out.append(f"{c.condition}: {c.errors} of {c.utterances} probe utterances failed")
            llm = c.llm
            failed = {k: n for k, n in (llm.failures if llm else {}).items() if k != "cancelled"}  # before 4: in them
            if llm is not None and failed:
                why = "; ".join(f'{k} ({n}): "{llm.failure_messages.get(k, "")}"' for k, n in failed.items())
                out.append(f"{c.condition}: {sum(failed.values())} of {llm.requests} LLM requests failed: {why}")
        return out
