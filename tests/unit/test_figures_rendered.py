"""One rule for every printed figure (core/figures.py), checked on what the report renders from stored results of
every kind, generated: no share printed above 100%, no percentile printed as one without the samples to support it
(p99 from 100, p90 from 10, p50 from 2), no interval from fewer than 10 samples; and a 5-sample step shown with its
count and the word in place of the interval."""

from __future__ import annotations

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servelab.bench.compare import side_by_side
from servelab.bench.verdict import judge
from servelab.coexist import Goals
from servelab.coexist import judge as judge_goals
from servelab.coexist.playback import Chunk, Utterance
from servelab.coexist.summary import figures
from servelab.core.figures import MIN_INTERVAL, TOO_FEW, Figure, Share, min_samples, quantile_figure
from servelab.core.records import ErrorClass, Labels, RequestRecord
from servelab.core.results import (
    Accuracy,
    BenchRun,
    Channel,
    CoexistRun,
    ConditionFigures,
    EvalRun,
    LlmFigures,
    SloSearch,
    Step,
    TargetEval,
)
from servelab.core.stats import wilson_interval
from servelab.core.summary import summarize
from servelab.report.answers import layers
from servelab.report.bench_view import bench
from servelab.report.coexist_view import coexist_section
from servelab.report.eval_view import eval_section
from servelab.report.model import Section

MS = 10**6
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PERCENT = re.compile(r"(\d[\d,]*(?:\.\d+)?)%(?! of a core)")  # a CPU's load over one core is not a share


def _text(out: Section) -> str:
    """Everything the section prints but a CPU column (a process's load over one core, not a share)."""
    cells = [cell for t in out.tables for row in t.rows for h, cell in zip(t.headers, row, strict=True)
             if "cpu" not in h] + [h for t in out.tables for h in t.headers]  # fmt: skip
    return "\n".join([*cells, *out.verdicts, *out.problems, *(t.note for t in out.tables), *(f[1] for f in out.facts)])


def _no_share_above_all(text: str) -> None:
    shown = [float(p.replace(",", "")) for p in PERCENT.findall(text)]
    assert all(p <= 100 for p in shown), text


def _stored(result: BenchRun | CoexistRun | EvalRun) -> BenchRun | CoexistRun | EvalRun:
    """What the store gives back: the result through its JSON."""
    return type(result).model_validate_json(result.model_dump_json())


@st.composite
def step_records(draw: st.DrawFn) -> list[RequestRecord]:
    """A step's requests: how many, each one's TTFT and chunks, some failed."""
    n = draw(st.integers(0, 130))
    out = []
    for i in range(n):
        sent = i * 500 * MS
        ttft = draw(st.integers(1, 400)) * MS
        chunks = [sent + ttft + k * 7 * MS for k in range(draw(st.integers(1, 4)))]
        r = RequestRecord(f"r{i}", "chat", scenario="chat", target="a", sent_ns=sent, first_token_ns=sent + ttft,
                          first_content_ns=sent + ttft, end_ns=chunks[-1] + MS, chunk_ns=chunks,
                          completion_tokens=len(chunks))  # fmt: skip
        if draw(st.integers(0, 9)) == 0:
            r.error = ErrorClass.HTTP_5XX
        out.append(r)
    return out


@st.composite
def evidence(draw: st.DrawFn) -> dict[str, float | int | None]:
    """A step's evidence, shares drawn past 100% (counters read at other instants, other clients beside)."""
    flight = draw(st.floats(0.5, 64))
    return {
        "workers": 1, "client_cpu_max": draw(st.floats(0, 1.3)), "loop_late_share_max": draw(st.floats(0, 1)),
        "loop_lag_p99_ms": draw(st.floats(0, 50)), "read_late_p99_ms": draw(st.floats(0, 10)),
        "schedule_lag_p99_ms": None, "scrapes": draw(st.integers(0, 40)), "in_flight_mean": flight,
        "engine_running_mean": draw(st.floats(0, 70)), "engine_waiting_mean": draw(st.floats(0, 5)),
        "not_in_engine_share": draw(st.floats(0, 1)), "engine_held_share": draw(st.floats(0, 2)),
        "client_occupancy": draw(st.floats(0, 1)), "kv_usage_max": draw(st.floats(0, 1)),
    }  # fmt: skip


def _pair_cell_obeys(cell: str, n: int) -> None:
    """``p50/p99``: the p99 printed as a number only from 100 samples, else the largest with the count."""
    p99 = cell.split("/", 1)[1]
    if n == 0:
        assert p99 == "-", cell
    elif n < min_samples(0.99):
        assert p99.startswith("max ") and p99.endswith(f"(n={n})"), cell
    else:
        assert "(n=" not in p99 and not p99.startswith("max"), cell


@SETTINGS
@given(step_records(), evidence(), st.floats(0.5, 1.0))
def test_a_bench_and_an_slo_search_render_no_share_above_all_and_no_unsupported_percentile(
    records: list[RequestRecord], ev: dict[str, float | int | None], attainment: float
) -> None:
    summary = summarize(records)
    step = Step(target="a", scenario="chat", labels=Labels(), summary=summary, bottleneck=judge(dict(ev)))
    tried = [(1.0, attainment, True), (2.0, attainment * 0.9, False)]
    search = SloSearch(best=1.0, tried=tried, slo={"ttft_ms": 300.0, "attainment": 0.9})
    for kind in ("bench", "bench-slo"):
        result = _stored(BenchRun(kind=kind, steps=[step], rows=side_by_side(records),
                                  slo={"a": search} if kind == "bench-slo" else {}))  # fmt: skip
        assert isinstance(result, BenchRun)
        out = Section("r", kind, kind, "complete", {})
        bench(out, result, None)
        text = _text(out)
        _no_share_above_all(text)
        (every,) = [t for t in out.tables if t.caption == "Every step"]
        (row,) = every.rows
        _pair_cell_obeys(row[2], summary.samples["ttft"])
        _pair_cell_obeys(row[3], summary.samples["itl"])
        for compared in (t for t in out.tables if t.caption == "Side by side"):
            speeds = len(result.rows[0].cells["a"].speeds)
            cell = compared.rows[0][1]
            if 0 < speeds < MIN_INTERVAL:
                assert TOO_FEW in cell and f"n={speeds}" in cell and "[" not in cell.split("\n")[0], cell


@st.composite
def conditions(draw: st.DrawFn) -> list[ConditionFigures]:
    """A voice alone and beside a load: utterances of drawn lengths (so the chunk intervals fall either side of
    100), the LLM's kept share drawn past 100%, with or without an interval."""
    out = []
    for name in ("alone", "decode", "prefill"):
        utterances = [
            Utterance(float(u), tuple(Chunk(u + 0.02 * (i + 1) + draw(st.floats(0, 0.01)), 0.04)
                                      for i in range(draw(st.integers(1, 40)))), name, None, "voice")
            for u in range(draw(st.integers(1, 5)))
        ]  # fmt: skip
        figs = figures(name, utterances, [0.0, 300.0])
        figs.probe = "voice"
        if name != "alone":
            share = draw(st.floats(0.3, 1.6))
            spread = draw(st.one_of(st.none(), st.floats(0.0, 0.3)))
            figs.llm = LlmFigures(requests=10, ok=8, errors={}, ttft_ms={"p50": 100.0}, tpot_ms={},
                                  aggregate_tok_s=10.0, tok_s_share=share, output_share=share,
                                  tok_s_share_low=None if spread is None else share - spread,
                                  tok_s_share_high=None if spread is None else share + spread, cancelled=2)  # fmt: skip
        out.append(figs)
    judge_goals(out, Goals())
    return out


@SETTINGS
@given(conditions())
def test_a_coexist_run_renders_no_share_above_all_and_no_unsupported_percentile(
    figs: list[ConditionFigures],
) -> None:
    result = _stored(CoexistRun(probe={"probe": "voice"}, sharing={"mode": "time-sliced"}, conditions=figs))
    assert isinstance(result, CoexistRun)
    out = Section("r", "coexist", "coexist", "complete", {})
    coexist_section(out, result)
    _no_share_above_all(_text(out))
    answer = layers(result)  # the report's first screen says the same shares
    _no_share_above_all("\n".join(" ".join(row) for row in answer.rows))
    probe_table = out.tables[0]
    for c, row in zip(result.conditions, probe_table.rows, strict=True):
        n = c.samples["interval"]
        gap = row[5]
        if 0 < n < min_samples(0.99):
            assert gap.startswith("max ") and f"(n={n})" in gap and "[" not in gap, gap
        elif n:
            assert "(n=" not in gap, gap


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), min_size=1, max_size=4))
def test_an_eval_run_prints_an_interval_only_from_ten_items(counts: list[tuple[int, int]]) -> None:
    targets = {}
    for i, (k, extra) in enumerate(counts):
        n = k + extra
        iv = wilson_interval(k, n)
        channel = Channel(k=k, n=n, rate=k / n if n else None, low=iv.low, high=iv.high)
        acc = Accuracy(n=n, outcomes={"correct": k, "wrong": extra}, strict=channel, semantic=channel)
        targets[f"t{i}"] = TargetEval(all=acc, suites={"quick": acc})
    result = _stored(EvalRun(targets=targets))
    assert isinstance(result, EvalRun)
    out = Section("r", "eval", "eval", "complete", {})
    eval_section(out, result, False)
    _no_share_above_all(_text(out))
    for row in out.tables[0].rows:
        n = int(row[-2].split("/")[1].split()[0]) if row[-2] != "-" else 0
        assert ("[" in row[-2]) == (n >= MIN_INTERVAL), row


def test_a_five_sample_step_shows_its_count_and_no_interval() -> None:
    records = [
        RequestRecord(f"r{i}", "chat", scenario="chat", target="a", sent_ns=i * 10**9, first_token_ns=i * 10**9 + t,
                      first_content_ns=i * 10**9 + t, end_ns=i * 10**9 + t + 30 * MS,
                      chunk_ns=[i * 10**9 + t + k * 10 * MS for k in range(4)], completion_tokens=4)
        for i, t in enumerate([20 * MS, 25 * MS, 30 * MS, 35 * MS, 90 * MS])
    ]  # fmt: skip
    summary = summarize(records)
    out = Section("r", "bench", "bench", "complete", {})
    bench(out, BenchRun(steps=[Step(target="a", scenario="chat", labels=Labels(), summary=summary)],
                        rows=side_by_side(records)), None)  # fmt: skip
    tables = {t.caption: t for t in out.tables}
    assert tables["Every step"].rows[0][2] == "30.0/max 90.0 (n=5)"  # the median, and the largest: not a p99
    speed, ttft, _ = tables["Side by side"].rows[0][1].split("\n")
    assert ttft == f"30.0 (n=5, {TOO_FEW})", ttft
    assert speed.endswith(f"(n=5, {TOO_FEW})"), speed


@given(st.lists(st.floats(0, 1e4), max_size=250), st.sampled_from([0.5, 0.9, 0.95, 0.99]))
def test_a_percentile_is_printed_as_one_only_from_enough_samples(samples: list[float], q: float) -> None:
    figure = quantile_figure(samples, q)
    said = figure.text()
    if not samples:
        assert said == "-"
    elif len(samples) >= min_samples(q):
        assert figure.supported and "(n=" not in said
    else:
        assert not figure.supported and said.endswith(f"(n={len(samples)})"), said
    assert min_samples(0.99) == 100 and min_samples(0.9) == 10 and min_samples(0.5) == 2


@given(st.floats(0, 5), st.one_of(st.none(), st.tuples(st.floats(0, 5), st.floats(0, 5))))
def test_a_share_is_never_printed_above_all(estimate: float, bounds: tuple[float, float] | None) -> None:
    low, high = sorted(bounds) if bounds else (None, None)
    said = Share(estimate, low, high).text()
    _no_share_above_all(said)
    if low is not None and high is not None and low <= 1.0 <= high:
        assert said.startswith("no measurable loss: "), said
    assert Figure(0.99, 1.0, 5, 2.0).text(unit="ms") == "max 2.0 ms (n=5)"
