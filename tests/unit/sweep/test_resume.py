"""Resuming a sweep: the stored run's finished points are kept, only the rest would start, in the same run."""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.core.errors import UsageError
from servelab.core.recorder import RunRecorder
from servelab.core.results import load_result
from servelab.core.results.sweep import PointFailure, PointFigures, PointLogged, PointPlan, SweepPoint, SweepRun
from servelab.core.store import STATUS_INTERRUPTED, RunStore
from servelab.report import section
from servelab.sweep import SweepOptions, make_grid, run_sweep, stored_options
from servelab.sweep.measure import Workload
from servelab.sweep.run import _args


def _point(index: int, key: str, args: list[str]) -> SweepPoint:
    figures = [PointFigures(scenario="code-chat@c1", concurrency=1, requests=3, ok=3, tok_s_per_user=40.0 + index,
                            aggregate_tok_s=8.0 + index, ttft_p95_ms=600.0, ttft_n=3, ttft_max_ms=700.0)]  # fmt: skip
    return SweepPoint(index=index, key=key, args=args, status="measured", command=f"llama-server {key}",
                      plan=PointPlan(fits=True, kv_tokens=8192 * (index + 1)),
                      logged=PointLogged(kv_tokens=8192 * (index + 1)), figures=figures)  # fmt: skip


def _interrupted(store: RunStore, options: SweepOptions, done: list[SweepPoint]) -> str:
    recorder = RunRecorder(store, "sweep", {"kind": "sweep"})
    keys = [p.key for p in options.grid.expand()]
    recorder.result(SweepRun(engine="llamacpp", planned=keys, points=done, settings=_args(options)))
    recorder.finish(STATUS_INTERRUPTED, "interrupted by SIGTERM")
    return recorder.run_id


def test_a_resumed_sweep_keeps_its_points_and_finishes_the_same_run(tmp_path: Path) -> None:
    options = SweepOptions(engine="llamacpp", grid=make_grid(["-np 1,2"], []))
    with RunStore(tmp_path / "runs.sqlite") as store:
        run_id = _interrupted(store, options, [_point(0, "-np 1", ["-np", "1"]), _point(1, "-np 2", ["-np", "2"])])
        said: list[str] = []
        resumed, _ = run_sweep(store, stored_options(store, run_id), said.append, resume=run_id)
        assert resumed == run_id and [r.run_id for r in store.list_runs()] == [run_id]
        info = store.get_run(run_id)
        assert info.status == "complete" and info.error is None
        stored = load_result(store, info)
        assert isinstance(stored, SweepRun) and [p.key for p in stored.points] == ["-np 1", "-np 2"]
        assert stored.points[0].figures[0].tok_s_per_user == 40.0  # kept, not measured again
        assert said == ["point 0: -np 1: kept from the stored run", "point 1: -np 2: kept from the stored run"]


def test_the_stored_settings_come_back_whole(tmp_path: Path) -> None:
    options = SweepOptions(engine="llamacpp", grid=make_grid(["-np 1,2", "LLAMA_ARG_THREADS=1,2"], ["-c 4096"]),
                           try_all=True, start_timeout_s=42.0,
                           work=Workload(("code-chat",), (1, 4), 3, 32, sessions=(1, 2), temperature=0.7))  # fmt: skip
    with RunStore(tmp_path / "runs.sqlite") as store:
        back = stored_options(store, _interrupted(store, options, []))
    assert back.grid.expand() == options.grid.expand()
    assert (back.engine, back.try_all, back.start_timeout_s) == ("llamacpp", True, 42.0)
    assert back.work == options.work  # the resumed points send the same requests (temperature too)


def test_only_a_sweep_run_resumes(tmp_path: Path) -> None:
    with RunStore(tmp_path / "runs.sqlite") as store:
        other = store.create_run("bench", {})
        with pytest.raises(UsageError, match="not a sweep"):
            stored_options(store, other)


def test_latest_resumes_the_newest_sweep_past_its_points_bench_runs(tmp_path: Path) -> None:
    """Each point's bench run is stored after the sweep: ``--resume latest`` means the sweep (found on an H100,
    2026-12-06: it named the last point's bench run and refused it as "not a sweep")."""
    options = SweepOptions(engine="llamacpp", grid=make_grid(["-np 1,2"], []))
    with RunStore(tmp_path / "runs.sqlite") as store:
        run_id = _interrupted(store, options, [_point(0, "-np 1", ["-np", "1"])])
        store.create_run("bench", {"args": {"sweep_point": "point-0"}})
        store.create_run("bench", {})  # a bench run of its own, after the sweep
        assert stored_options(store, "latest").grid.expand() == options.grid.expand()
        assert store.get_run("latest", kinds=("sweep",)).run_id == run_id


def test_the_report_sets_the_plan_beside_the_log_and_names_the_best(tmp_path: Path) -> None:
    options = SweepOptions(engine="llamacpp", grid=make_grid(["-np 1,2,3"], []))
    oom = PointFailure(kind="out of memory", reason="failed to allocate buffer for kv cache")
    failed = SweepPoint(index=2, key="-np 3", args=["-np", "3"], status="failed", plan=PointPlan(kv_tokens=24576),
                        failure=oom)  # fmt: skip
    with RunStore(tmp_path / "runs.sqlite") as store:
        run_id = _interrupted(store, options, [_point(0, "-np 1", ["-np", "1"]), _point(1, "-np 2", ["-np", "2"]),
                                               failed])  # fmt: skip
        out = section(store, store.get_run(run_id), with_plots=False)
    points = out.tables[0]
    assert points.headers[:5] == ["point", "flags", "plan KV", "logged KV", "difference"]
    assert points.rows[1][2:5] == ["16,384", "16,384", "+0 (+0.0%)"]
    assert "out of memory" in points.rows[2][-1]
    assert any("point 2 (-np 3): out of memory" in p for p in out.problems)
    best = next(v for v in out.verdicts if v.startswith("best"))
    assert "point 1" in best and out.evidence[best] == "command: llama-server -np 2"
    assert "equalled the engine's log on 2 of 2" in " ".join(out.verdicts)
