"""The sweep's answer: the Pareto front of tok/s per user against tok/s per GPU, and the best point under the SLO."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from servelab.core.results.sweep import PointFigures, PointPlan, SweepPoint, SweepRun
from servelab.sweep import Candidate, best_under, candidates, pareto_front
from servelab.sweep.pareto import dominates, gpus

speed = st.floats(min_value=0.1, max_value=1000, allow_nan=False)
candidate = st.builds(
    Candidate, point=st.integers(0, 20), key=st.just("k"), command=st.just("c"), step=st.just("s"),
    concurrency=st.integers(1, 8), per_user=speed, per_gpu=speed, ttft_p95_ms=st.none(),
    slo_attained=st.one_of(st.none(), st.floats(0, 1)), fits=st.one_of(st.none(), st.booleans()),
)  # fmt: skip


@given(st.lists(candidate, max_size=25))
def test_the_front_is_undominated_and_dominates_the_rest(found: list[Candidate]) -> None:
    front = pareto_front(found)
    assert all(not dominates(other, c) for c in front for other in found)
    for c in found:
        assert c in front or any(dominates(f, c) for f in front)


@given(st.lists(candidate, max_size=25), st.floats(0.05, 1))
def test_the_best_keeps_the_slo_and_fits_and_none_such_is_faster(found: list[Candidate], attainment: float) -> None:
    best = best_under(found, attainment)
    eligible = [c for c in found if c.fits is not False and c.slo_attained is not None and c.slo_attained >= attainment]
    if best is None:
        assert not eligible
        return
    assert best in eligible
    assert all(c.per_gpu <= best.per_gpu for c in eligible)


def test_tok_s_per_gpu_is_the_aggregate_over_the_tensor_parallel_gpus() -> None:
    figures = [PointFigures(scenario="code-chat@c4", concurrency=4, requests=8, ok=8, tok_s_per_user=50.0,
                            aggregate_tok_s=180.0)]  # fmt: skip
    points = [
        SweepPoint(index=0, key="-tp 2", args=["-tp", "2"], status="measured", figures=figures,
                   plan=PointPlan(fits=True)),
        SweepPoint(index=1, key="--tensor-parallel-size=4", args=["--tensor-parallel-size=4"], status="measured",
                   figures=figures),
    ]  # fmt: skip
    found = candidates(SweepRun(points=points))
    assert [(c.point, c.per_gpu) for c in found] == [(0, 90.0), (1, 45.0)]
    assert gpus(["--max-num-seqs", "4"]) == 1


def test_a_point_the_plan_refused_is_never_named_best() -> None:
    """It ran with --try-all, but it does not leave the co-tenants their memory."""
    fast = Candidate(0, "a", "c", "s", 1, 100.0, 100.0, None, 1.0, False)
    slow = Candidate(1, "b", "c", "s", 1, 10.0, 10.0, None, 1.0, True)
    assert best_under([fast, slow], 0.9) == slow
    assert best_under([fast, slow], None) == slow


def test_the_trade_offs_are_drawn_and_a_p95_without_its_samples_is_left_out() -> None:
    """Two plots: per user against per GPU (every step), TTFT p95 against per GPU (only steps with 20 TTFTs or more:
    a p95 of 5 samples is not one; that step is named under the plots)."""
    from servelab.report.model import Section
    from servelab.report.sweep_view import sweep_section

    def step(c: int, n: int) -> PointFigures:
        return PointFigures(scenario=f"code-chat@c{c}", concurrency=c, requests=n, ok=n, tok_s_per_user=100.0 / c,
                            aggregate_tok_s=90.0 * c, ttft_p95_ms=50.0 * c, ttft_n=n, tok_s_n=n)  # fmt: skip

    points = [SweepPoint(index=i, key=f"--x {i}", status="measured", plan=PointPlan(fits=True),
                         figures=[step(1, 24), step(4, 24 if i else 5)]) for i in range(2)]  # fmt: skip
    out = Section("r", "sweep", "sweep", "complete")
    sweep_section(out, SweepRun(points=points), with_plots=True)
    assert [p.caption for p in out.plots] == ["tok/s per user against tok/s per GPU", "TTFT p95 against tok/s per GPU"]
    assert all(p.png.startswith(b"\x89PNG") for p in out.plots)
    assert len(out.not_drawn) == 1 and "point 0 code-chat@c4" in out.not_drawn[0]
    bare = Section("r", "sweep", "sweep", "complete")
    sweep_section(bare, SweepRun(points=points))
    assert bare.plots == [] and bare.not_drawn == []
