"""Stores written by older servelab still list, export and render: tests/fixtures/store-schema1.sqlite (made by the
code of commit 519fed8 with tests/fixtures/make_store_schema1.py: run store schema 1) and
tests/fixtures/store-schema2.sqlite (commit a5dc7ff, make_store_schema2.py: schema 2, one run of every kind with
its results as named summaries, before results were typed)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from servelab.cli import main
from servelab.core.export import SCHEMA_VERSION, RunExport, export_run
from servelab.core.results import BenchRun, CoexistRun, EvalRun, PlanRun, load_result
from servelab.core.store import MIGRATIONS, STATUS_COMPLETE, RunStore
from servelab.report import write_report

FIXTURES = Path(__file__).parents[1] / "fixtures"
OLD = FIXTURES / "store-schema1.sqlite"
SCHEMA2 = FIXTURES / "store-schema2.sqlite"


def _copy(src: Path, tmp_path: Path) -> Path:
    path = tmp_path / src.name
    shutil.copy(src, path)
    return path


@pytest.fixture()
def old_store(tmp_path: Path) -> Path:
    return _copy(OLD, tmp_path)


@pytest.fixture()
def schema2_store(tmp_path: Path) -> Path:
    return _copy(SCHEMA2, tmp_path)


def test_an_old_store_is_migrated_and_its_runs_list(old_store: Path) -> None:
    with RunStore(old_store) as store:
        assert store.schema_version == len(MIGRATIONS) == 3
        runs = store.list_runs()
        assert sorted(r.kind for r in runs) == ["bench", "eval"]
        assert all(r.status == STATUS_COMPLETE and r.error is None and r.record_count > 0 for r in runs)


def test_an_old_run_exports_and_renders(old_store: Path, tmp_path: Path) -> None:
    with RunStore(old_store) as store:
        ids = [r.run_id for r in store.list_runs()]
        for run_id in ids:
            exported = RunExport.model_validate(export_run(store, run_id))
            assert exported.run.run_id == run_id and exported.records and exported.summaries
        html = write_report(store, ids, tmp_path / "report.html").read_text()
    assert (all(run_id in html for run_id in ids) and "<svg" in html) or "<img" in html
    assert main(["runs", "list", "--store", str(old_store)]) == 0
    assert main(["runs", "export", ids[0], "--store", str(old_store)]) == 0


def test_every_kind_stored_before_typed_results_reads_as_its_typed_result(schema2_store: Path) -> None:
    with RunStore(schema2_store) as store:
        assert store.schema_version == 3
        runs = {r.kind: r for r in store.list_runs()}
        assert set(runs) == {"bench", "bench-slo", "eval", "plan", "coexist"}
        got = {kind: load_result(store, info) for kind, info in runs.items()}
        records = {kind: store.records(info.run_id) for kind, info in runs.items()}
    bench = got["bench"]
    assert isinstance(bench, BenchRun) and bench.status == "complete"
    assert {(s.scenario, s.labels.level) for s in bench.steps} >= {("code-chat@c1", 1), ("code-chat@c2", 2)}
    assert {r.scenario for r in bench.rows} == {s.scenario for s in bench.steps}
    assert sum(c.n for r in bench.rows for c in r.cells.values()) == len(records["bench"])
    slo = got["bench-slo"]
    assert isinstance(slo, BenchRun) and slo.kind == "bench-slo" and slo.slo["fixture"].tried
    evaluated = got["eval"]
    assert isinstance(evaluated, EvalRun) and evaluated.targets["fixture"].all.n == len(records["eval"]) == 32
    assert len(evaluated.replies) == 32 and {r.suite for r in evaluated.replies} == {"strict"}
    coexist = got["coexist"]
    assert isinstance(coexist, CoexistRun) and [c.condition for c in coexist.conditions] == ["alone"]
    assert coexist.conditions[0].chunks == 10 and coexist.probe["probe"] == "cpu"
    plan = got["plan"]
    assert isinstance(plan, PlanRun) and plan.plan.fits and plan.plan.capacity.tokens > 0
    assert "vllm serve" in plan.plan.command
    # the old packed scenario strings read back as labels
    assert {r.labels.level for r in records["bench"]} == {1, 2}
    assert {(r.labels.suite, r.labels.repeat) for r in records["eval"]} == {("strict", 0)}


def test_every_kind_stored_before_typed_results_exports_renders_and_shows(
    schema2_store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with RunStore(schema2_store) as store:
        ids = [r.run_id for r in store.list_runs()]
        for run_id in ids:
            exported = RunExport.model_validate(export_run(store, run_id))
            assert exported.schema_version == SCHEMA_VERSION == 2 and exported.result is not None
        html = write_report(store, ids, tmp_path / "report.html").read_text()
    assert all(f'id="run-{run_id}"' in html for run_id in ids) and html.count('<img class="plot"') >= 4
    for run_id in ids:
        assert main(["runs", "show", run_id, "--store", str(schema2_store)]) == 0
    shown = capsys.readouterr().out
    for answer in ("Side by side", "highest concurrency within the SLO", "Outcomes", "Will it fit", "Probe cpu"):
        assert answer in shown, answer
    assert "see runs export" not in shown and "{'" not in shown  # no Python reprs
