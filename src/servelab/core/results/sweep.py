"""A sweep run's result: every configuration started, the plan beside what the engine logged, and what it measured."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from servelab.core.results.base import Model, RunResult

FailureKind = Literal["out of memory", "flag refused", "timeout", "crash", "measurement failed"]
PointStatus = Literal["measured", "failed", "skipped"]
CacheState = Literal["cold", "cached", "none", "unknown"]  # none: the engine compiles nothing


class PointPlan(Model):
    """What servelab's plan predicts for the point's flags (``error``: why no plan could be made)."""

    fits: bool | None = None
    verdict: str = ""
    kv_tokens: int | None = None  # the engine's KV cache size, as planned
    kv_pool_bytes: int | None = None
    weights_bytes: int | None = None
    max_sequences: float | None = None  # sessions of the planned context the KV cache holds
    context: int | None = None
    command: str = ""
    error: str | None = None


class PointLogged(Model):
    """What the engine's own start-up log said it allocated."""

    kv_tokens: int | None = None
    kv_pool_bytes: int | None = None
    weights_bytes: int | None = None
    cudagraph_bytes: int | None = None
    max_concurrency: float | None = None  # vLLM: sessions of its max_model_len the KV cache holds
    context: int | None = None  # max_model_len (vLLM) or context a slot holds (llama.cpp)
    error: str | None = None  # why the log could not be read


class PointStart(Model):
    """How the start went: seconds to /health, the phases the log timed, and a cold or cached compile."""

    seconds: float | None = None
    cache: CacheState = "unknown"
    phases: dict[str, float] = Field(default_factory=dict)  # phase -> seconds, as the log said
    log: str = ""


class PointFailure(Model):
    kind: FailureKind
    reason: str  # the engine's own line that says why, or ours
    exit_code: int | None = None
    log_tail: list[str] = Field(default_factory=list)


class PointFigures(Model):
    """One bench step at the point: medians and percentiles of its ok requests, with their counts."""

    scenario: str
    concurrency: int | None = None
    requests: int = 0
    ok: int = 0
    tok_s_per_user: float | None = None  # median per-stream decode tok/s
    aggregate_tok_s: float | None = None  # output tok/s of the engine over the step's active window
    ttft_p50_ms: float | None = None
    ttft_p95_ms: float | None = None
    ttft_n: int = 0
    ttft_max_ms: float | None = None  # what a p95 from too few samples is printed as
    tok_s_n: int = 0  # streams the per-user median rests on
    itl_p95_ms: float | None = None
    slo_attained: float | None = None  # share of requests within the sweep's SLO (None: no SLO given)
    sessions: bool = False  # a session step: its concurrency is the number of concurrent sessions
    peak_tokens: int | None = None  # a session step: the most tokens a turn held (prompt and reply)


class PointEval(Model):
    """An eval suite's score at the point: the strict channel's correct share, with its interval and count."""

    suite: str
    k: int
    n: int
    rate: float | None = None
    low: float | None = None
    high: float | None = None


class SweepPoint(Model):
    index: int
    key: str  # the point's flags and environment as one line (what a resume matches by)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    command: str = ""  # the whole command line started
    status: PointStatus
    plan: PointPlan | None = None
    logged: PointLogged | None = None
    start: PointStart | None = None
    failure: PointFailure | None = None
    skipped: str | None = None
    bench_run: str | None = None
    figures: list[PointFigures] = Field(default_factory=list)
    eval_run: str | None = None
    evals: list[PointEval] = Field(default_factory=list)
    while_measured: list[str] = Field(default_factory=list)  # what the engine's log said then that qualifies a figure

    def bench_runs(self) -> list[str]:
        """Its bench runs: the request scenarios' (the closed-loop steps), then the session scenarios' where both
        ran (stored joined by a comma)."""
        return [run for run in (self.bench_run or "").split(",") if run]


class SweepRun(RunResult):
    kind: Literal["sweep"] = "sweep"
    engine: str = "vllm"
    model: str = ""
    planned: list[str] = Field(default_factory=list)  # every point's key, in order
    points: list[SweepPoint] = Field(default_factory=list)  # those done (measured, failed or skipped)
    slo: dict[str, float | None] = Field(default_factory=dict)  # ttft_ms, itl_ms, tpot_ms, e2e_ms, attainment
    settings: dict[str, Any] = Field(default_factory=dict)  # what a resume starts the rest with

    def request_failures(self) -> list[str]:
        return [f"point {p.index} ({p.key}): {p.failure.reason}" for p in self.points
                if p.failure is not None and p.failure.kind == "measurement failed"]  # fmt: skip
