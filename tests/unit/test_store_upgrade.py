"""A store written before the run store's second migration (tests/fixtures/store-schema1.sqlite, made by the code
of commit 519fed8 with tests/fixtures/make_store_schema1.py) still lists, exports and renders after it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from servelab.cli import main
from servelab.core.export import RunExport, export_run
from servelab.core.store import MIGRATIONS, STATUS_COMPLETE, RunStore
from servelab.report import write_report

OLD = Path(__file__).parents[1] / "fixtures" / "store-schema1.sqlite"


@pytest.fixture()
def old_store(tmp_path: Path) -> Path:
    path = tmp_path / "runs.sqlite"
    shutil.copy(OLD, path)
    return path


def test_an_old_store_is_migrated_and_its_runs_list(old_store: Path) -> None:
    with RunStore(old_store) as store:
        assert store.schema_version == len(MIGRATIONS) == 2
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
