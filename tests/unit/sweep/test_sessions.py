"""Sessions held at each point, beside the plan: the count stops at the first level that missed the SLO, and the
plan's and the log's counts are their KV tokens over the size the sessions reached."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servelab.cli import main
from servelab.core.results.sweep import PointFigures, PointLogged, PointPlan, SweepPoint, SweepRun
from servelab.report.model import Section
from servelab.report.sweep_view import sweep_section
from servelab.sweep import sessions_held


def _point(levels: list[tuple[int, float, int]], planned: int = 300_000, logged: int = 250_000) -> SweepPoint:
    figures = [PointFigures(scenario=f"agentic@c{n}", concurrency=n, requests=6 * n, ok=6 * n, slo_attained=share,
                            sessions=True, peak_tokens=peak) for n, share, peak in levels]  # fmt: skip
    figures.append(PointFigures(scenario="code-chat@c4", concurrency=4, requests=8, ok=8, slo_attained=1.0))
    return SweepPoint(index=0, key="--x", status="measured", plan=PointPlan(kv_tokens=planned),
                      logged=PointLogged(kv_tokens=logged), figures=figures)  # fmt: skip


def test_the_count_stops_at_the_first_level_that_missed() -> None:
    """A higher level that passed after a miss (noise, or a luckier draw) does not raise what the point held."""
    run = SweepRun(points=[_point([(1, 1.0, 110_000), (2, 0.95, 125_000), (3, 0.5, 127_000), (4, 0.92, 127_000)])],
                   slo={"ttft_ms": 3000.0, "attainment": 0.9})  # fmt: skip
    (held,) = sessions_held(run)
    assert held.scenario == "agentic" and held.held == 2 and held.peak_tokens == 125_000
    assert held.tried == [(1, True), (2, True), (3, False), (4, True)]
    assert held.plan_sessions == 2.4 and held.logged_sessions == 2.0
    out = Section("r", "sweep", "sweep", "complete")
    sweep_section(out, run)
    table = next(t for t in out.tables if t.caption.startswith("Sessions held"))
    assert table.rows == [["0", "agentic", "1, 2, 3 x, 4", "2", "125,000", "2.40", "2.00"]]


def test_no_slo_no_count_and_a_first_miss_holds_none() -> None:
    assert sessions_held(SweepRun(points=[_point([(1, 1.0, 100)])])) == []
    (held,) = sessions_held(SweepRun(points=[_point([(1, 0.2, 100_000)])], slo={"attainment": 0.9}))
    assert held.held is None and held.peak_tokens == 100_000


@given(st.lists(st.tuples(st.floats(0, 1), st.integers(1, 200_000)), min_size=1, max_size=8), st.floats(0.01, 1))
def test_every_level_up_to_the_count_met_the_slo_and_the_next_did_not(
    shares: list[tuple[float, int]], attainment: float
) -> None:
    levels = [(n, share, peak) for n, (share, peak) in enumerate(shares, start=1)]
    (held,) = sessions_held(SweepRun(points=[_point(levels)], slo={"attainment": attainment}))
    count = held.held or 0
    assert all(share >= attainment for n, share, _ in levels if n <= count)
    assert count == len(levels) or levels[count][1] < attainment


def test_slo_turns_are_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["sweep", "--engine", "llamacpp", "--grid", "-np 1", "--store", str(tmp_path / "s.sqlite")]
    assert main([*base, "--slo-turns", "warm"]) == 2
    assert "--slo-turns goes with an SLO" in capsys.readouterr().err
    assert main([*base, "--slo", "ttft=1s", "--slo-turns", "cold"]) == 2
    assert "--slo-turns is all or warm" in capsys.readouterr().err
