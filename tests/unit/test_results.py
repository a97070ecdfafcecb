"""Typed results: stored whole and read back by kind and version (NaN kept, a newer version refused), the status
the run ended with said on the result too, and labels as record fields (the packed scenario strings of records
stored before read back into the same fields)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from servelab.core.errors import StoreError
from servelab.core.recorder import recording
from servelab.core.records import ErrorClass, Labels, RequestRecord
from servelab.core.results import BenchRun, Cell, CheckRun, CheckStep, Row, Step, load_result, save_result
from servelab.core.stats import Interval
from servelab.core.store import RunStore
from servelab.core.summary import summarize


@pytest.mark.parametrize(
    ("packed", "labels"),
    [
        ("chat@c4", Labels(step="chat@c4", level=4, sweep_of="chat")),
        ("chat@r0.5", Labels(step="chat@r0.5", rate=0.5, sweep_of="chat")),
        ("prefix-long:warm", Labels(step="prefix-long", phase="warm")),
        ("prefix-long@c2:cold", Labels(step="prefix-long@c2", level=2, phase="cold", sweep_of="prefix-long")),
        ("llm-decode@prefill", Labels(step="llm-decode", condition="prefill")),
        ("tools/umbrella#2+3", Labels(step="tools/umbrella#2+3", suite="tools", item="umbrella", repeat=2, turn=3)),
        ("strict/key#0", Labels(step="strict/key#0", suite="strict", item="key", repeat=0, turn=1)),
        ("warmup", Labels(step="warmup", phase="warmup")),
        ("code-chat", Labels(step="code-chat")),
    ],
)
def test_a_packed_scenario_string_reads_back_as_labels(packed: str, labels: Labels) -> None:
    assert Labels.from_scenario(packed) == labels
    old = RequestRecord(request_id="r", endpoint="chat", scenario=packed).to_dict()
    del old["labels"]  # as stored before labels were fields
    assert RequestRecord.from_dict(old).labels == labels


def test_labels_round_trip_through_the_store(tmp_path: Path) -> None:
    labels = Labels(step="chat@c4", level=4, phase="warm", condition="both", repeat=0)
    record = RequestRecord(request_id="r", endpoint="chat", scenario="anything", labels=labels)
    assert record.to_dict()["labels"] == {"step": "chat@c4", "level": 4, "phase": "warm", "condition": "both",
                                          "repeat": 0}  # fmt: skip
    with RunStore(tmp_path / "s.sqlite") as store:
        run = store.create_run("bench", {})
        store.add_record(run, record)
        assert store.records(run) == [record]


def _bench_result() -> BenchRun:
    """One step whose only request failed: its medians are NaN, which must survive the store."""
    rec = RequestRecord(request_id="r", endpoint="chat", scenario="chat@c1", target="t", error=ErrorClass.HTTP_4XX)
    cell = Cell(n=1, speeds=[], ttfts=[], ok=0, tok_s=Interval(math.nan, math.nan, math.nan), ttft_ms=None,
                aggregate_tok_s=0.0, cached_tokens=None)  # fmt: skip
    return BenchRun(
        steps=[Step(target="t", scenario="chat@c1", labels=Labels(step="chat@c1", level=1), summary=summarize([rec]))],
        rows=[Row(scenario="chat@c1", cells={"t": cell}, differs={"tok_s": False, "ttft_ms": False})],
        warnings=["t/chat@c1: a warning"],
    )


def test_a_result_is_stored_whole_and_reads_back_equal(tmp_path: Path) -> None:
    result = _bench_result()
    with RunStore(tmp_path / "s.sqlite") as store:
        with recording(store, "bench", {}) as run:
            run.result(result)
            info = store.get_run(run.run_id)
            got = load_result(store, info)
            assert got is not None and got.model_dump_json() == result.model_dump_json()  # NaN != NaN: as text
        back = load_result(store, store.get_run(run.run_id))
    assert isinstance(back, BenchRun) and back.status == "complete" and back.warnings == result.warnings
    step, cell = back.steps[0], back.rows[0].cells["t"]
    assert step.labels.level == 1 and step.summary.requests == 1 and step.summary.errors == {"http_4xx": 1}
    assert math.isnan(step.summary.ttft_ms["p50"]) and cell.tok_s is not None and math.isnan(cell.tok_s.estimate)


def test_a_failed_run_says_so_on_its_result(tmp_path: Path) -> None:
    with RunStore(tmp_path / "s.sqlite") as store:
        with pytest.raises(RuntimeError), recording(store, "check", {}) as run:
            run.result(CheckRun(steps=[CheckStep(step="plan", run_id="x", verdicts=["fits"])]))
            raise RuntimeError("the engine went away")
        stored = store.result(run.run_id)
        assert stored is not None
        kind, version, text = stored
        assert (kind, version) == ("check", 1)
        assert json.loads(text)["status"] == "failed" and "the engine went away" in json.loads(text)["error"]


def test_a_result_newer_than_this_servelab_is_refused(tmp_path: Path) -> None:
    with RunStore(tmp_path / "s.sqlite") as store:
        run = store.create_run("bench", {})
        save_result(store, run, BenchRun())
        store.put_result(run, "bench", 99, BenchRun().model_dump_json())
        with pytest.raises(StoreError, match="newer"):
            load_result(store, store.get_run(run))
        store.put_result(run, "bench", 1, '{"kind": "bench", "steps": "not a list"}')
        with pytest.raises(StoreError, match="does not read"):
            load_result(store, store.get_run(run))


def test_a_run_without_a_result_or_summaries_has_none(tmp_path: Path) -> None:
    with RunStore(tmp_path / "s.sqlite") as store:
        run = store.create_run("bench", {})
        assert load_result(store, store.get_run(run)) is None


def test_a_coexist_condition_whose_llm_load_all_failed_answers_nothing() -> None:
    """The HTML once said "beside prefill: p99 1.7 ms (alone 1.7)" when every prefill request got HTTP 400."""
    from servelab.core.results import CoexistRun, ConditionFigures, LlmFigures
    from servelab.report.coexist_view import verdicts

    def condition(name: str, llm: LlmFigures | None) -> ConditionFigures:
        return ConditionFigures(condition=name, utterances=4, chunks=100, errors=0, ttfa_p50_ms=5.0, ttfa_p95_ms=6.0,
                                interval_p50_ms=1.0, interval_p95_ms=1.5, interval_p99_ms=1.7, interval_p99_low_ms=1.6,
                                interval_p99_high_ms=1.8, interval_max_ms=2.0, lag_p99_ms=0.1, rtf_mean=0.1,
                                rtf_p95=0.1, pace_rtf=0.1, llm=llm)  # fmt: skip

    said = {"context too long": "max 8192"}
    refused = LlmFigures(requests=20, ok=0, errors={"http_4xx": 20}, ttft_ms={}, tpot_ms={}, aggregate_tok_s=0.0,
                         failures={"context too long": 20}, failure_messages=said)  # fmt: skip
    run = CoexistRun(conditions=[condition("alone", None), condition("prefill", refused)])
    (line,) = verdicts(run)
    assert line.startswith("beside prefill: no answer: every LLM request failed (context too long)")
    (failed,) = run.request_failures()
    assert failed == 'prefill: 20 of 20 LLM requests failed: context too long (20): "max 8192"'
