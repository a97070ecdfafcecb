"""Running a bench: targets resolved, scenarios at levels or rates, records stored as they finish, the
side-by-side summary."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from servelab.bench.compare import side_by_side
from servelab.bench.confirm import more_workers, relieved, with_relief
from servelab.bench.metrics import Scraper, derive, series
from servelab.bench.nodes import step_hosts, with_nodes
from servelab.bench.sizing import no_verdict, sized, slo_requests
from servelab.bench.slo import SLO, Search, search_max_level, search_max_rate
from servelab.bench.verdict import bottleneck
from servelab.core.errors import UsageError
from servelab.core.recorder import RunRecorder
from servelab.core.records import RequestRecord
from servelab.core.results import BenchRun, EngineMetrics, Goodput, Relieved, Row, Scalar, SloSearch, Step
from servelab.core.store import STATUS_COMPLETE, RunStore
from servelab.core.summary import active_window_ns, summarize
from servelab.engines.gpu_telemetry import GpuSampler
from servelab.engines.local_server import FrontendCpu
from servelab.engines.manifest import build_manifest
from servelab.load.arrivals import ClosedLoop, OpenLoop, arrivals_for
from servelab.load.cluster import run_on_ray
from servelab.load.runner import Load, ScenarioResult, ScenarioRun, Target, room
from servelab.load.scenarios import Scenario
from servelab.load.sessions import fit_spec, run_sessions, session_figures, step_labels
from servelab.load.targets import TargetSpec, resolve_all
from servelab.load.workers import default_workers, run_in_workers, usable_cores

SERIES_FIGURES = ("kv_usage", "running", "waiting", "prefix_hits", "generation_tokens")


@dataclass
class BenchResult:
    run_id: str
    results: list[ScenarioResult] = field(default_factory=list)
    stored: BenchRun = field(default_factory=BenchRun)  # the typed result, as stored
    told: list[str] = field(default_factory=list)  # the run's own warnings, beside its steps'

    @property
    def metrics(self) -> dict[str, dict[str, Scalar]]:
        """Target -> its derived /metrics figures (the stored result's)."""
        return {t: m.derived for t, m in self.stored.metrics.items()}

    @property
    def rows(self) -> list[Row]:
        return self.stored.rows

    @property
    def records(self) -> list[RequestRecord]:
        return [r for res in self.results for r in res.records]

    @property
    def warnings(self) -> list[str]:
        out = [f"{res.target}/{res.scenario}: {w}" for res in self.results for w in res.warnings]
        out += [f"{res.target}/{res.scenario}: {res.stopped_early}" for res in self.results if res.stopped_early]
        out += [f"{t}: {m['spec_warning']}" for t, m in self.metrics.items() if m.get("spec_warning")]
        return out + self.told


def resolve_targets(specs: Sequence[tuple[str, str] | TargetSpec]) -> list[Target]:
    """Each target as its server describes it (NAME, URL pairs: the first model it serves, no key)."""
    return resolve_all([s if isinstance(s, TargetSpec) else TargetSpec(*s) for s in specs])


async def _run_target_scenario(
    target: Target,
    scenario: Scenario,
    load: Load,
    sink: Callable[[RequestRecord], None],
    scrape_interval: float,
) -> tuple[ScenarioResult, list[Any], list[float]]:
    """The step, with the target's /metrics scraped beside it and, for a server on this host, the CPU of the
    processes holding its port."""
    scraper, frontend = Scraper(target.url, interval=scrape_interval), FrontendCpu(target.url)
    scraper.start()
    frontend.start()
    sampling = asyncio.create_task(_sample_every(frontend, scrape_interval / 2))
    workers = load.workers or default_workers(load, scenario)
    try:
        if scenario.sessions is not None and workers > 1 and not load.ray:
            result = await run_in_workers(target, scenario, load, sink, workers=workers, ready=scraper.mark)
        elif scenario.sessions is not None or scenario.trace is not None:
            result = await run_sessions(target, scenario, load, sink)
            result.warnings += ["a session or trace workload runs from this host alone, not on Ray"] if load.ray else []
        elif load.ray:
            result = await run_on_ray(target, scenario, load, sink, load.ray, ready=scraper.mark)
        elif workers > 1:
            result = await run_in_workers(target, scenario, load, sink, workers=workers, ready=scraper.mark)
        else:
            result = await ScenarioRun(target, scenario, load, sink, ready=scraper.mark).run()
    finally:
        sampling.cancel()
        samples = await scraper.stop()
    sends = [r.sent_ns for r in result.records if r.sent_ns is not None]
    ends = [r.end_ns for r in result.records if r.end_ns is not None]
    return result, samples, frontend.shares(min(sends, default=None), max(ends, default=None))


def _drop(record: RequestRecord) -> None:
    """The sink of a run whose records are not stored (a verdict's confirmation)."""


async def _sample_every(frontend: FrontendCpu, interval: float) -> None:
    if not frontend.pids:
        return
    while True:
        await asyncio.sleep(interval)
        frontend.sample()


class BenchSession:
    """One stored run: steps (a scenario on a target) append records, summaries and /metrics samples."""

    def __init__(
        self,
        store: RunStore,
        kind: str,
        targets: Sequence[Target],
        manifest_extra: dict[str, Any],
        args: dict[str, Any] | None,
        on_record: Callable[[RequestRecord], None] | None = None,
        scrape_interval: float = 0.5,
        goodput: SLO | None = None,
        confirm: bool = False,
    ) -> None:
        manifest = build_manifest(kind, args or {}, {t.name: t.url for t in targets}, manifest_extra)
        self.store, self.scrape_interval, self.goodput, self.confirm = store, scrape_interval, goodput, confirm
        self.recorder = RunRecorder(store, kind, manifest, on_record)
        self.run_id = self.recorder.run_id
        self.result = BenchResult(self.run_id)
        self.stored = self.result.stored = BenchRun(kind="bench-slo" if kind == "bench-slo" else "bench")
        self.samples: dict[str, list[Any]] = {t.name: [] for t in targets}
        self.measured: list[RequestRecord] = []  # every stored record, a step's before it ends too
        self.gpu = GpuSampler(scrape_interval)  # NVML on the run clock, where a GPU is visible

    def _sink(self, record: RequestRecord) -> None:
        self.measured.append(record)
        self.recorder.sink(record)

    def step(self, target: Target, scenario: Scenario, load: Load) -> ScenarioResult:
        if load.prefix_tokens is not None and scenario.prefix_tokens:
            scenario = replace(scenario, prefix_tokens=load.prefix_tokens)
        load = sized(load, scenario)
        res, got, frontend = asyncio.run(_run_target_scenario(target, scenario, load, self._sink, self.scrape_interval))
        derived = derive(got)  # this step's /metrics figures, once
        _warn_unintended_hits(res, scenario, derived)
        _warn_busy(res, target, scenario, load, derived)
        self.result.results.append(res)
        self.samples[target.name] += got
        pattern = arrivals_for(load, scenario)
        open_loop, level = (
            isinstance(pattern, OpenLoop),
            pattern.concurrency if isinstance(pattern, ClosedLoop) else None,
        )
        labels = sorted({r.scenario for r in res.records})
        mine = {label: [r for r in res.records if r.scenario == label] for label in labels}
        unjudged = {label: no_verdict(mine[label], level) for label in labels}
        if unjudged_all := step_hosts(self.recorder, f"{target.name}/{scenario.name}", res, self.scrape_interval):
            unjudged = {label: unjudged[label] or unjudged_all for label in labels}
        verdicts = {label: with_nodes(bottleneck(mine[label], got, res.clients, open_loop, frontend, res.records),
                                      res.clients) for label in labels if unjudged[label] is None}  # fmt: skip
        if self.confirm and any(v.limit == "client" for v in verdicts.values()):
            relief = self._relieve(target, scenario, load, res)
            verdicts = {k: with_relief(v, relief, open_loop) if relief and v.limit == "client" else v
                        for k, v in verdicts.items()}  # fmt: skip
        for label in labels:
            summary, good = summarize(mine[label]), _goodput(mine[label], self.goodput)
            turns = session_figures(mine[label], derived, self.goodput) if scenario.sessions else None
            self.stored.steps.append(Step(target=target.name, scenario=label, labels=step_labels(mine[label][0]),
                                          summary=summary, clients=res.clients, bottleneck=verdicts.get(label),
                                          no_verdict=unjudged[label], goodput=good, sessions=turns))  # fmt: skip
        self.recorder.result(self.stored)
        return res

    def _relieve(self, target: Target, scenario: Scenario, load: Load, res: ScenarioResult) -> Relieved | None:
        """The step again with twice the load processes (records kept apart, only their rate used)."""
        workers = load.workers or default_workers(load, scenario)
        unconfirmed = f"{scenario.name} on {target.name}: the client verdict was not confirmed"
        if (more := more_workers(workers, usable_cores())) is None:
            self.result.told.append(f"{unconfirmed}: no core for a load process beyond {workers}")
            return None
        again = replace(load, workers=more)
        try:
            after, _, _ = asyncio.run(_run_target_scenario(target, scenario, again, _drop, self.scrape_interval))
        except Exception as exc:  # the step's own records and verdict stand; only the confirmation is lost
            self.result.told.append(f"{unconfirmed}: its second run failed ({type(exc).__name__}: {exc})")
            return None
        return relieved(res.records, after.records, workers, more)

    def searched(self, target: str, found: Search, slo: SLO, sessions: bool = False, done: bool = True) -> None:
        over: Literal["rate", "sessions", "concurrency"] = (
            "rate" if found.over == "rate" else "sessions" if sessions else "concurrency"
        )
        limits = {k: v for k, v in asdict(slo).items() if k != "turns"}
        self.stored.slo[target] = SloSearch(over=over, best=found.best, tried=found.tried, slo=limits,
                                            turns="warm" if slo.turns == "warm" else "all", done=done)  # fmt: skip
        self.recorder.result(self.stored)

    @contextmanager
    def running(self) -> Iterator[BenchSession]:
        """The steps inside; at the end (a failure too) the metrics, the side-by-side rows and the status."""
        stopped: BaseException | None = None
        if said := self.gpu.start():
            self.result.told.append(said)
        try:
            yield self
        except BaseException as exc:
            stopped = exc
            raise
        finally:
            self.close(stopped)

    def close(self, stopped: BaseException | None = None) -> BenchResult:
        """The metrics and the side-by-side rows of what was measured (an interrupted run's too), then the status."""
        self.stored.metrics = _metrics(self.samples)
        self.stored.rows = side_by_side(self.measured)  # a step cut short counts what it measured
        self.stored.warnings = self.result.warnings
        self.recorder.result(self.stored)
        output = sum(r.completion_tokens or 0 for r in self.measured)
        self.recorder.summary("bench/gpu", self.gpu.stop().stored(output))  # samples and energy per output token
        if stopped is None:
            self.recorder.finish(STATUS_COMPLETE)
        else:
            self.recorder.fail(stopped)
        return self.result


def refuse_too_long(targets: Sequence[Target], scenarios: Sequence[Scenario], load: Load) -> None:
    """A scenario whose prompt and output cannot fit a target's context is refused before anything is sent: the
    server would refuse every request and no figure would be left."""
    too_long = []
    for target in targets:
        for s in scenarios:
            if s.sessions is not None:
                fit_spec(s.sessions, target.max_model_len, target.name)  # refused in its own words
                continue
            output = load.max_tokens or max([p.max_tokens or s.max_tokens for p in s.prompts] or [s.max_tokens])
            prompt = load.prefix_tokens if load.prefix_tokens is not None and s.prefix_tokens else s.prefix_tokens
            if s.synthetic is not None:
                prompt, output = s.synthetic.input_tokens[1], load.max_tokens or s.synthetic.output_tokens[1]
            limit = room(target, output)
            if limit is not None and prompt > limit:
                too_long.append(f"{s.name} on {target.name} ({prompt:,} prompt + {output:,} output tokens)")
    if too_long:
        limits = ", ".join(sorted({f"{t.name} {t.max_model_len:,}" for t in targets if t.max_model_len}))
        raise UsageError(
            f"too long for the target's context ({limits} tokens): {'; '.join(too_long)}",
            hint="lower --prefix-tokens or --max-tokens, or serve the model with a longer --max-model-len",
        )


def at_levels(scenarios: Sequence[Scenario], levels: Sequence[int]) -> list[Scenario]:
    """Each scenario once per concurrency level (a sweep), named ``NAME@cN``."""
    return [
        replace(s, name=f"{s.name}@c{c}", concurrency=c, sweep_of=s.sweep_of or s.name)
        for s in scenarios
        for c in levels
    ]


def at_rates(scenarios: Sequence[Scenario], rates: Sequence[float]) -> list[Scenario]:
    """Each scenario once per open-loop request rate (a rate sweep), named ``NAME@rR``."""
    return [
        replace(s, name=f"{s.name}@r{r:g}", rate=r, sweep_of=s.sweep_of or s.name) for s in scenarios for r in rates
    ]


def run_bench(
    store: RunStore,
    targets: Sequence[Target],
    scenarios: Sequence[Scenario],
    load: Load,
    *,
    order: str = "interleaved",
    on_record: Callable[[RequestRecord], None] | None = None,
    on_step: Callable[[str, str], None] | None = None,
    scrape_interval: float = 0.5,
    args: dict[str, Any] | None = None,
    goodput: SLO | None = None,
    confirm: bool = False,
) -> BenchResult:
    """Every scenario on every target; records stored as they finish, summaries at the end of each step (with
    ``confirm``, a step whose verdict is the client runs again with twice the load processes: :mod:`.confirm`)."""
    refuse_too_long(targets, scenarios, load)
    session = BenchSession(
        store,
        "bench",
        targets,
        {"scenarios": [s.name for s in scenarios], "load": asdict(load)},
        args,
        on_record,
        scrape_interval,
        goodput,
        confirm,
    )
    steps = (
        [(t, s) for s in scenarios for t in targets]
        if order == "interleaved"
        else [(t, s) for t in targets for s in scenarios]
    )
    with session.running():
        for target, scenario in steps:
            if on_step:
                on_step(target.name, scenario.name)
            session.step(target, scenario, load)
    return session.result


def search_slo(
    store: RunStore,
    targets: Sequence[Target],
    scenario: Scenario,
    load: Load,
    slo: SLO,
    *,
    limit: float = 64,
    over: str = "concurrency",
    start_rate: float = 0.5,
    on_step: Callable[[str, str], None] | None = None,
    args: dict[str, Any] | None = None,
) -> tuple[BenchResult, dict[str, Search]]:
    """The highest concurrency (or open-loop request rate, ``over="rate"``) at which each target keeps
    ``slo.attainment`` of its requests within the SLO."""
    refuse_too_long(targets, [scenario], load)
    session = BenchSession(
        store,
        "bench-slo",
        targets,
        {"scenario": scenario.name, "slo": asdict(slo), "load": asdict(load), "over": over},
        args,
    )
    found: dict[str, Search] = {}
    with session.running():
        for target in targets:
            found[target.name] = _search_target(session, target, scenario, load, slo, limit, over, start_rate, on_step)
            session.searched(target.name, found[target.name], slo, sessions=scenario.sessions is not None)
    return session.result, found


def _search_target(
    session: BenchSession,
    target: Target,
    scenario: Scenario,
    load: Load,
    slo: SLO,
    limit: float,
    over: str,
    start_rate: float,
    on_step: Callable[[str, str], None] | None,
) -> Search:
    def run_step(step: Scenario, step_load: Load) -> list[RequestRecord]:
        if on_step:
            on_step(target.name, step.name)
        return session.step(target, step, step_load).records

    def tried(search: Search) -> None:  # stored after every level: an interrupted search keeps what it tried
        session.searched(target.name, search, slo, sessions=scenario.sessions is not None, done=False)

    if over == "rate":
        return search_max_rate(
            lambda rate: run_step(
                at_rates([scenario], [rate])[0],
                replace(
                    load, requests=max(load.requests or 0, math.ceil(4 * rate), slo_requests(slo.attainment)), rate=None
                ),
            ),
            slo,
            start_rate,
            limit,
            on_attempt=tried,
        )
    return search_max_level(
        lambda level: run_step(
            at_levels([scenario], [level])[0],
            replace(load, requests=max(load.requests or 0, slo_requests(slo.attainment, level)), concurrency=level),
        ),
        slo,
        int(limit),
        on_attempt=tried,
    )


def _warn_unintended_hits(res: ScenarioResult, scenario: Scenario, derived: dict[str, Scalar]) -> None:
    """Where the server does not report cached tokens per request, its prefix-cache counters still tell."""
    if scenario.cache != "cold" or any(r.cached_tokens is not None for r in res.records):
        return
    hits = derived.get("prefix_hit_rate")
    if hits:
        res.warnings.append(f"/metrics counted prefix-cache hits ({hits:.1%} of prompt tokens) during a cold scenario")


def _warn_busy(res: ScenarioResult, target: Target, scenario: Scenario, load: Load, derived: dict[str, Scalar]) -> None:
    """The engine ran more requests at once than this step sent: other clients shared it, and its figures."""
    pattern = arrivals_for(load, scenario)
    running = derived.get("running_max")
    if isinstance(pattern, ClosedLoop) and isinstance(running, int | float) and running > pattern.concurrency:
        res.warnings.append(
            f"{target.name}'s /metrics counted {running:g} requests running while this step sent at most "
            f"{pattern.concurrency}: other clients were using the server, and its figures include their load"
        )


def _goodput(records: Sequence[RequestRecord], slo: SLO | None) -> Goodput | None:
    """Requests within the SLO per second of the step's active window (errors are never good)."""
    if slo is None:
        return None
    window = active_window_ns([r for r in records if r.ok]) / 1e9
    met = sum(slo.good(r) for r in records)
    return Goodput(
        slo=slo.limits(),
        met=met,
        requests_per_s=met / window if window else 0.0,
    )


def _metrics(samples: dict[str, list[Any]]) -> dict[str, EngineMetrics]:
    t0 = min((s.at_ns for got in samples.values() for s in got), default=0)
    return {
        target: EngineMetrics(
            derived=derive(got), t0_ns=t0, series={name: series(got, name, t0) for name in SERIES_FIGURES}
        )
        for target, got in samples.items()
    }
