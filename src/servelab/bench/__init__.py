"""servelab bench: speed on the workloads that matter, honestly measured, side by side."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from servelab.bench.compare import Row, rows_to_dicts, side_by_side
from servelab.bench.metrics import Scraper, derive, series
from servelab.bench.runner import Load, ScenarioResult, ScenarioRun, Target, new_nonce
from servelab.bench.scenarios import Scenario, expand, scenario_names
from servelab.check.smoke import discover_model
from servelab.core.manifest import build_manifest
from servelab.core.records import RequestRecord
from servelab.core.store import STATUS_COMPLETE, STATUS_FAILED, RunStore
from servelab.core.summary import summarize
from servelab.engines.client import api_base

__all__ = ["BenchResult", "Load", "Scenario", "Target", "expand", "resolve_targets", "run_bench", "scenario_names"]

SERIES_FIGURES = ("kv_usage", "running", "waiting", "prefix_hits", "generation_tokens")


@dataclass
class BenchResult:
    run_id: str
    results: list[ScenarioResult] = field(default_factory=list)
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)  # target -> derived figures
    rows: list[Row] = field(default_factory=list)

    @property
    def records(self) -> list[RequestRecord]:
        return [r for res in self.results for r in res.records]

    @property
    def warnings(self) -> list[str]:
        out = [f"{res.target}/{res.scenario}: {w}" for res in self.results for w in res.warnings]
        out += [f"{res.target}/{res.scenario}: {res.stopped_early}" for res in self.results if res.stopped_early]
        out += [f"{t}: {m['spec_warning']}" for t, m in self.metrics.items() if m.get("spec_warning")]
        return out


def resolve_targets(specs: Sequence[tuple[str, str]]) -> list[Target]:
    return [Target(name, url, discover_model(url)) for name, url in specs]


async def _run_target_scenario(
    target: Target,
    scenario: Scenario,
    load: Load,
    sink: Callable[[RequestRecord], None],
    nonce: str,
    scrape_interval: float,
) -> tuple[ScenarioResult, list[Any]]:
    scraper = Scraper(api_base(target.url).removesuffix("/v1") + "/metrics", interval=scrape_interval)
    scraper.start()
    try:
        result = await ScenarioRun(target, scenario, load, sink, nonce).run()
    finally:
        samples = await scraper.stop()
    return result, samples


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
) -> BenchResult:
    """Every scenario on every target; records stored as they finish, summaries at the end of each step."""
    manifest = build_manifest(
        "bench",
        args or {},
        {t.name: t.url for t in targets},
        {"scenarios": [s.name for s in scenarios], "load": asdict(load)},
    )
    run_id = store.create_run("bench", manifest)
    result, nonce = BenchResult(run_id), new_nonce()
    samples: dict[str, list[Any]] = {t.name: [] for t in targets}

    def sink(record: RequestRecord) -> None:
        store.add_record(run_id, record)
        if on_record:
            on_record(record)

    steps = (
        [(t, s) for s in scenarios for t in targets]
        if order == "interleaved"
        else [(t, s) for t in targets for s in scenarios]
    )
    status = STATUS_FAILED
    try:
        for target, scenario in steps:
            if load.prefix_tokens is not None and scenario.prefix_tokens:
                scenario = replace(scenario, prefix_tokens=load.prefix_tokens)
            if on_step:
                on_step(target.name, scenario.name)
            res, got = asyncio.run(_run_target_scenario(target, scenario, load, sink, nonce, scrape_interval))
            _warn_unintended_hits(res, scenario, got)
            result.results.append(res)
            samples[target.name] += got
            for label in sorted({r.scenario for r in res.records}):
                store.put_summary(
                    run_id,
                    f"{target.name}/{label}",
                    summarize([r for r in res.records if r.scenario == label]).to_dict(),
                )
        status = STATUS_COMPLETE
    finally:
        _store_metrics(store, run_id, result, samples)
        result.rows = side_by_side(result.records)
        store.put_summary(run_id, "compare", {"rows": rows_to_dicts(result.rows), "warnings": result.warnings})
        store.finish_run(run_id, status)
    return result


def _warn_unintended_hits(res: ScenarioResult, scenario: Scenario, got: list[Any]) -> None:
    """Where the server does not report cached tokens per request, its prefix-cache counters still tell."""
    if scenario.cache != "cold" or any(r.cached_tokens is not None for r in res.records):
        return
    hits = derive(got).get("prefix_hit_rate")
    if hits:
        res.warnings.append(f"/metrics counted prefix-cache hits ({hits:.1%} of prompt tokens) during a cold scenario")


def _store_metrics(store: RunStore, run_id: str, result: BenchResult, samples: dict[str, list[Any]]) -> None:
    t0 = min((s.at_ns for got in samples.values() for s in got), default=0)
    for target, got in samples.items():
        result.metrics[target] = derive(got)
        store.put_summary(
            run_id,
            f"metrics/{target}",
            {
                "derived": result.metrics[target],
                "t0_ns": t0,
                "series": {name: series(got, name, t0) for name in SERIES_FIGURES},
            },
        )
