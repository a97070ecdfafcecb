"""servelab bench against the real embedded engine."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from servelab.bench import Load, expand, resolve_targets, run_bench
from servelab.bench.metrics import figure
from servelab.core.records import Labels
from servelab.core.results import BenchRun, load_result
from servelab.core.store import RunStore
from servelab.core.summary import active_window_ns, ttft_ms
from servelab.engines.embedded import EngineState


@pytest.fixture()
def store(tmp_path: Path) -> RunStore:
    return RunStore(tmp_path / "runs.sqlite")


def test_single_and_four_concurrent_streams_with_metrics_aligned(engine: EngineState, store: RunStore) -> None:
    targets = resolve_targets([("embedded", engine.url)])
    result = run_bench(
        store, targets, expand(["code-chat", "concurrent-4"]), Load(requests=4, max_tokens=24), scrape_interval=0.2
    )
    single = [r for r in result.records if r.scenario == "code-chat"]
    four = [r for r in result.records if r.scenario == "concurrent-4"]
    assert len(single) == 4 and len(four) == 4 and all(r.ok for r in result.records)
    assert all(r.completion_tokens == 24 for r in result.records)  # ignore_eos + min_tokens held the length
    assert active_window_ns(four) < sum(r.end_ns - r.sent_ns for r in four)  # type: ignore[operator]
    # the single-stream requests ran one at a time
    ordered = sorted(single, key=lambda r: r.sent_ns or 0)
    assert all(a.end_ns <= b.sent_ns for a, b in itertools.pairwise(ordered))  # type: ignore[operator]
    stored = load_result(store, store.get_run(result.run_id))
    assert isinstance(stored, BenchRun) and stored.status == "complete"
    metrics = stored.metrics["embedded"]
    assert isinstance(metrics.derived["samples"], int) and metrics.derived["samples"] >= 3
    # aligned: while the four streams ran, the engine said it was running several requests
    t0 = metrics.t0_ns
    start, end = (min(r.sent_ns for r in four) - t0) / 1e9, (max(r.end_ns for r in four) - t0) / 1e9  # type: ignore[type-var,operator]
    during = [v for t, v in metrics.series["running"] if start <= t <= end]
    assert during and max(during) >= 2
    steps = {(s.target, s.scenario): s for s in stored.steps}
    assert steps["embedded", "concurrent-4"].summary.ok == 4 and steps["embedded", "concurrent-4"].labels.level == 4
    assert {row.scenario for row in stored.rows} == {"code-chat", "concurrent-4"}
    assert {r.labels for r in four} == {Labels(step="concurrent-4", level=4)}
    # vLLM with one API server publishes that process's CPU counter: the verdict reads it, and it agrees with the
    # port holder's CPU read through /proc here (over the scrapes' window, not the requests')
    verdict = steps["embedded", "concurrent-4"].bottleneck
    assert verdict is not None and verdict.evidence["frontend_cpu_from"] == "server", verdict
    reported, host = verdict.evidence["frontend_cpu_reported"], verdict.evidence["frontend_cpu_host_max"]
    assert isinstance(reported, float) and isinstance(host, float) and host > 0
    assert abs(reported - host) <= 0.05 + 0.25 * host, (reported, host)


def test_cold_then_warm_prefix_verified_by_cached_tokens(engine: EngineState, store: RunStore) -> None:
    targets = resolve_targets([("embedded", engine.url)])
    result = run_bench(
        store,
        targets,
        expand(["prefix-long"]),
        Load(requests=1, max_tokens=4, prefix_tokens=2500, warmup=0),
        scrape_interval=0.2,
    )
    (cold,) = [r for r in result.records if r.scenario == "prefix-long:cold"]
    (warm,) = [r for r in result.records if r.scenario == "prefix-long:warm"]
    assert cold.ok and warm.ok and cold.prompt_tokens == warm.prompt_tokens and cold.prompt_tokens > 2000  # type: ignore[operator]
    assert cold.cached_tokens == 0
    assert warm.cached_tokens is not None and warm.cached_tokens >= cold.prompt_tokens - 256  # type: ignore[operator]
    assert warm.cached_tokens % 128 == 0  # whole CPU blocks
    assert ttft_ms(warm) < ttft_ms(cold)  # type: ignore[operator]
    assert not [w for w in result.warnings if "prefix cache" in w]
    derived = result.metrics["embedded"]
    assert derived["prefix_hit_rate"] is not None and derived["prefix_hit_rate"] > 0
    assert figure({"vllm:prefix_cache_hits_total": 1.0}, "prefix_hits") == 1.0


def test_slo_search_on_the_engine(engine: EngineState, store: RunStore) -> None:
    from servelab.bench import SLO, search_slo
    from servelab.load.scenarios import load_scenario

    targets = resolve_targets([("embedded", engine.url)])
    load = Load(requests=2, max_tokens=8, warmup=0)
    _, generous = search_slo(store, targets, load_scenario("code-chat"), load, SLO(ttft_ms=60_000), limit=4)
    assert generous["embedded"].best == 4 and [t[0] for t in generous["embedded"].tried] == [1, 2, 4]
    result, impossible = search_slo(store, targets, load_scenario("code-chat"), load, SLO(ttft_ms=0.001), limit=4)
    assert impossible["embedded"].best is None and impossible["embedded"].tried == [(1, 0.0, False)]
    stored = load_result(store, store.get_run(result.run_id))
    assert isinstance(stored, BenchRun) and stored.kind == "bench-slo" and stored.slo["embedded"].best is None


def test_slo_search_over_rate_runs_open_loop_steps(engine: EngineState, store: RunStore) -> None:
    from servelab.bench import SLO, search_slo
    from servelab.load.scenarios import load_scenario

    targets = resolve_targets([("embedded", engine.url)])
    load = Load(requests=2, max_tokens=4, warmup=0, arrival="constant")
    result, found = search_slo(
        store, targets, load_scenario("code-chat"), load, SLO(ttft_ms=60_000), limit=2.0, over="rate", start_rate=0.5
    )
    search = found["embedded"]
    assert search.over == "rate" and search.best == 2.0
    assert [t[0] for t in search.tried] == [0.5, 1.0, 2.0]
    at_two = [r for r in result.records if r.scenario == "code-chat@r2"]
    assert len(at_two) >= 8  # at least 4 seconds of arrivals at each rate (more where the attainment needs them)
    due = sorted(r.scheduled_ns for r in at_two if r.scheduled_ns is not None)
    gaps_ms = [(b - a) / 1e6 for a, b in itertools.pairwise(due)]
    assert len(due) == len(at_two) and all(abs(g - 500) < 1 for g in gaps_ms)  # on the constant 2 req/s clock
    stored = load_result(store, store.get_run(result.run_id))
    assert isinstance(stored, BenchRun) and stored.slo["embedded"].over == "rate"
    assert {r.labels.rate for r in at_two} == {2.0} and {r.labels.level for r in at_two} == {None}


def test_two_load_workers_against_the_real_engine_in_json(
    engine: EngineState, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`bench --workers 2 --json` on the embedded vLLM: every request once, both workers' load, the verdict with the
    engine's own gauges and the vLLM frontend process found holding the port, the full summary and the goodput."""
    import json

    from servelab.cli import main

    argv = ["bench", "--target", f"e={engine.url}", "--scenario", "concurrent-4", "--requests", "8", "--max-tokens",
            "16", "--workers", "2", "--goodput", "ttft=60s", "--json",
            "--store", str(tmp_path / "runs.sqlite")]  # fmt: skip
    assert main(argv) == 0
    got = json.loads(capsys.readouterr().out)
    (step,) = got["steps"]
    assert step["summary"]["requests"] == 8 and step["summary"]["ok"] == 8
    assert {"p50", "p99"} <= set(step["summary"]["ttft_ms"]) and step["summary"]["e2e_ms"]
    assert [c["worker"] for c in step["clients"]] == [0, 1] and sum(c["requests"] for c in step["clients"]) == 8
    verdict = step["bottleneck"]
    assert got["bottlenecks"] == {"e/concurrent-4": verdict["limit"]}
    assert verdict["evidence"]["workers"] == 2 and verdict["evidence"]["frontend_processes"] >= 1
    assert verdict["evidence"]["scrapes"] >= 1 and verdict["evidence"]["engine_running_mean"] is not None
    assert step["goodput"]["met"] == 8
