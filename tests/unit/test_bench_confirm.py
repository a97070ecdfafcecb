"""A client verdict tested by relieving the client (``bench --confirm``): the step again with twice the load
processes, and what that changed decides between the client and the server side.

The server in the run test is servelab.testing.engine_sim, a FAKE engine (not an LLM) in a process of its own, capped
at 4 running requests: a server whose token rate no number of load processes can raise, on demand, which a real
engine cannot be made to be. The client is made to read as saturated by lowering the verdict's CPU line to zero, so
the first verdict is the client whatever this machine's load; the second run then has to overturn it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

import servelab.bench.verdict as verdict
from servelab.bench import Load, run_bench
from servelab.bench.confirm import CONFIRMED_GAIN, more_workers, relieved, with_relief
from servelab.bench.verdict import judge
from servelab.core.records import RequestRecord
from servelab.core.results import BenchRun, Step, load_result
from servelab.core.store import RunStore
from servelab.core.summary import summarize
from servelab.load import Target
from servelab.load.scenarios import load_scenario
from servelab.report.bench_view import bottleneck_table

S = 10**9


def _records(n: int, tokens: int, wall_s: float) -> list[RequestRecord]:
    return [RequestRecord(f"r{i}", "chat", sent_ns=0, end_ns=int(wall_s * S), completion_tokens=tokens)
            for i in range(n)]  # fmt: skip


def _evidence(**extra: float | int) -> dict[str, float | int | None]:
    ev: dict[str, float | int | None] = {
        "workers": 1, "client_cpu_max": 0.96, "loop_late_share_max": 0.7, "loop_lag_p99_ms": 200.0,
        "read_late_p99_ms": 40.0, "schedule_lag_p99_ms": 300.0, "engine_held_share": 0.93, "client_occupancy": 0.94,
    }  # fmt: skip
    ev.update(extra)
    return ev


def test_a_client_verdict_whose_relief_raised_the_rate_is_confirmed() -> None:
    first = judge(_evidence())
    assert first.limit == "client"
    relief = relieved(_records(10, 100, 1.0), _records(10, 120, 1.0), 1, 2)
    assert relief is not None and relief.change == pytest.approx(0.2) and relief.what.startswith("2 load processes")
    got = with_relief(first, relief, open_loop=False)
    assert got.limit == "client" and "confirmed: 2 load processes instead of 1 changed the rate +20%" in got.reason
    assert got.relieved == relief and (got.hint or "").startswith("raise --workers")


def test_a_client_verdict_whose_relief_changed_nothing_names_the_server_side() -> None:
    """The H200 case: one load process at 96% of a core, the engine holding 93%; four processes changed the rate by
    -4%: the engine, with the client near its limit; with one API server at 99% of a core: the frontend."""
    relief = relieved(_records(10, 100, 1.0), _records(10, 96, 1.0), 1, 4)
    assert relief is not None and relief.change < CONFIRMED_GAIN
    engine = with_relief(judge(_evidence()), relief, open_loop=False)
    assert engine.limit == "engine" and engine.reason.startswith("not the load generator: 4 load processes"), engine
    assert "-4%" in engine.reason and "client" in engine.near and engine.relieved == relief
    front = with_relief(judge(_evidence(frontend_cpu_max=0.99, frontend_processes=1)), relief, open_loop=False)
    assert front.limit == "server frontend" and "99% of a core" in front.reason, front
    step = Step(
        target="vllm", scenario="chat@c64", labels={}, summary=summarize(_records(2, 10, 1.0)), bottleneck=front
    )
    (row,) = bottleneck_table([step]).rows
    assert row[1] == "server frontend\n(client, engine near too)\n(4 load processes instead of 1: -4%)"


def test_no_relief_without_a_rate_or_a_core() -> None:
    assert relieved([], _records(2, 10, 1.0), 1, 2) is None
    assert more_workers(1, 2) == 2 and more_workers(3, 4) == 4 and more_workers(2, 2) is None


@pytest.mark.parametrize("sim", [["--max-running", 4, "--step-ms", 5]], indirect=True)
def test_a_forced_client_verdict_on_a_capped_engine_is_overturned_by_the_second_run(
    sim: Target, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(verdict, "CLIENT_CPU", 0.0)  # every load process reads as saturated
    scenario = replace(load_scenario("code-chat"), concurrency=16)
    load = Load(requests=64, warmup=1, max_tokens=20, workers=1)
    stored_records = -1
    for confirm in (False, True):
        store = RunStore(tmp_path / f"runs-{confirm}.sqlite")
        result = run_bench(store, [sim], [scenario], load, scrape_interval=0.1, confirm=confirm)
        stored = load_result(store, store.get_run(result.run_id))
        assert isinstance(stored, BenchRun) and stored.status == "complete"
        (step,) = stored.steps
        got = step.bottleneck
        assert got is not None
        if not confirm:
            assert got.limit == "client" and got.relieved is None, got
            stored_records = len(store.records(result.run_id))
            continue
        assert got.relieved is not None and got.relieved.what == "2 load processes instead of 1", got
        assert got.relieved.change < CONFIRMED_GAIN and got.limit == "engine", got
        assert got.reason.startswith("not the load generator") and "client" in got.near
        assert len(store.records(result.run_id)) == stored_records  # the second run's records are not stored
        assert step.summary.requests == 64, got.reason


@pytest.mark.parametrize("sim", [["--max-running", 4, "--step-ms", 5]], indirect=True)
def test_a_client_verdict_with_no_core_to_relieve_it_stands_and_says_so(
    sim: Target, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import servelab.bench.run as bench_run

    monkeypatch.setattr(verdict, "CLIENT_CPU", 0.0)
    monkeypatch.setattr(bench_run, "usable_cores", lambda: 1)
    scenario = replace(load_scenario("code-chat"), concurrency=8)
    store = RunStore(tmp_path / "runs.sqlite")
    result = run_bench(store, [sim], [scenario], Load(requests=16, warmup=0, max_tokens=8), confirm=True)
    (step,) = result.stored.steps
    assert step.bottleneck is not None and step.bottleneck.limit == "client" and step.bottleneck.relieved is None
    assert any("not confirmed: no core for a load process beyond 1" in w for w in result.warnings), result.warnings
