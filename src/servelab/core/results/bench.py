"""A bench run's result: every step's figures, the targets side by side, the engine's /metrics, SLO searches."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from servelab.core.failures import failure_text
from servelab.core.records import Labels
from servelab.core.results.base import Model, RunResult, Scalar
from servelab.core.results.sessions import SessionFigures
from servelab.core.stats import Interval
from servelab.core.summary import Summary


class ClientLoad(Model):
    """What one load-generating process spent and how late it was, over a step."""

    worker: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0  # the process's CPU time (all its threads)
    cpu_share: float = 0.0  # of one core: cpu_s / wall_s
    loop_lag_ms: dict[str, float] = Field(default_factory=dict)  # p50 / p99 / max: a 10 ms timer's lateness
    loop_late_share: float = 0.0  # of those ticks, the share 5 ms late or more (busy, or starved of CPU)
    read_late_ms: dict[str, float] = Field(default_factory=dict)  # p50 / p99 / max: kernel receive -> read
    requests: int = 0  # finished (recorded) by this process
    in_flight_max: int = 0
    died: str | None = None  # why it stopped before its share was done (its in-flight requests are lost)
    node: str | None = None  # the cluster node it ran on (a Ray actor; None: this host)


Limit = Literal["client", "server frontend", "engine", "server"]


class Relieved(Model):
    """The step run again with the named side relieved (``bench --confirm``): what that changed."""

    side: Limit  # the side relieved
    what: str  # how, in words ("2 load processes instead of 1")
    tok_s_before: float
    tok_s_after: float
    change: float  # after / before - 1


class Bottleneck(Model):
    """Which side limited a step, and the figures that say so."""

    limit: Limit
    reason: str  # one sentence with the evidence
    hint: str | None = None  # what to change
    note: str | None = None  # the client's own delay in the latency figures, whatever limited the throughput
    near: list[Limit] = Field(default_factory=list)  # other sides near their own limits: relieved, it moves there
    evidence: dict[str, Scalar] = Field(default_factory=dict)
    relieved: Relieved | None = None  # the step again with the named side relieved, where that was asked
    nodes: dict[str, str] = Field(default_factory=dict)  # Ray: each node's load processes, and whether they kept up


class Goodput(Model):
    """Requests that met the SLO, per second of the step's active window (as vllm bench serve's goodput)."""

    slo: dict[str, float | None]  # ttft_ms, tpot_ms, e2e_ms
    met: int
    requests_per_s: float


class Step(Model):
    """One scenario at one level (or rate) on one target, and what its requests measured."""

    target: str
    scenario: str  # the step's name as shown (``chat@c4``, ``prefix-long:warm``)
    labels: Labels  # the same as fields: step, level, rate, phase
    summary: Summary
    clients: list[ClientLoad] = Field(default_factory=list)  # one per load-generating process
    bottleneck: Bottleneck | None = None
    no_verdict: str | None = None  # why no side is named: no request succeeded, or it never had its concurrency
    goodput: Goodput | None = None
    sessions: SessionFigures | None = None  # a session workload's per-turn and per-session figures


class Cell(Model):
    """One target in one row: medians with bootstrap intervals over the raw per-request values."""

    n: int
    speeds: list[float]
    ttfts: list[float]
    ok: int
    tok_s: Interval | None  # per-stream decode tok/s, median
    ttft_ms: Interval | None  # median
    aggregate_tok_s: float
    cached_tokens: int | None
    failures: dict[str, int] = Field(default_factory=dict)  # why requests failed, most common first
    failure_messages: dict[str, str] = Field(default_factory=dict)  # the server's own words, one per reason


class Row(Model):
    scenario: str
    cells: dict[str, Cell]  # target -> cell
    differs: dict[str, bool]  # "tok_s" / "ttft_ms" -> first two targets differ (Mann-Whitney p < 0.05)


class EngineMetrics(Model):
    """A target's /metrics scraped beside the run: derived figures and time series (seconds from the first scrape)."""

    derived: dict[str, Scalar] = Field(default_factory=dict)
    t0_ns: int = 0
    series: dict[str, list[tuple[float, float]]] = Field(default_factory=dict)


class SloSearch(Model):
    over: Literal["concurrency", "rate", "sessions"] = "concurrency"
    best: float | None  # the highest level within the SLO; None when even the lowest missed it
    tried: list[tuple[float, float, bool]]  # level, attainment, met
    slo: dict[str, float | None]  # ttft_ms, tpot_ms, e2e_ms, attainment
    turns: Literal["all", "warm"] = "all"  # sessions: "warm" judged only the turns past each session's first
    done: bool = True  # False: the search was cut short; ``best`` is the best of the levels it had tried


class BenchRun(RunResult):
    kind: Literal["bench", "bench-slo"] = "bench"
    version: int = 3  # 2: steps carry their clients' load, the bottleneck verdict and goodput
    # 3: a step not judged says why (no_verdict); summaries count every figure's samples and keep their largest
    steps: list[Step] = Field(default_factory=list)
    rows: list[Row] = Field(default_factory=list)
    metrics: dict[str, EngineMetrics] = Field(default_factory=dict)  # target -> its /metrics
    slo: dict[str, SloSearch] = Field(default_factory=dict)  # target -> its search (a bench-slo run)

    def request_failures(self) -> list[str]:
        return self.failed_steps() if self.kind == "bench" else []  # an SLO search counts failures as misses

    def failed_steps(self) -> list[str]:
        """One line per step with failed requests: ``target/step: 3 of 5 failed: context too long (3): "..."``."""
        return [
            f"{s.target}/{s.scenario}: "
            + failure_text(s.summary.failures, s.summary.failure_messages, s.summary.requests)
            for s in self.steps
            if s.summary.failures
        ]
