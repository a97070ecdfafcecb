import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from servelab.core.errors import StoreError, UsageError
from servelab.core.export import RunExport, export_run, json_schema
from servelab.core.records import ErrorClass, RequestRecord
from servelab.core.store import MIGRATIONS, STATUS_RUNNING, RunStore

DOCS = Path(__file__).resolve().parents[2] / "docs"

# sha256 of every shipped migration: editing one breaks existing stores. Append a new one instead.
SHIPPED = ["70cd6d9e"]


def test_shipped_migrations_are_never_edited() -> None:
    digests = [hashlib.sha256(m.encode()).hexdigest()[:8] for m in MIGRATIONS]
    assert digests[: len(SHIPPED)] == SHIPPED


def test_migrates_fresh_file_and_reopens_without_rerunning(store_path: Path) -> None:
    with RunStore(store_path) as store:
        assert store.schema_version == len(MIGRATIONS)
        run = store.create_run("t", {"a": 1})
    with RunStore(store_path) as store:  # a second open must not fail on CREATE TABLE
        assert [r.run_id for r in store.list_runs()] == [run]


def test_refuses_a_store_from_a_newer_servelab(store_path: Path) -> None:
    db = sqlite3.connect(store_path)
    db.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
    db.close()
    with pytest.raises(StoreError, match="newer"):
        RunStore(store_path)


def test_records_round_trip_and_export_validates(store_path: Path) -> None:
    record = RequestRecord(
        request_id="abc",
        endpoint="chat",
        target="t",
        chunk_ns=[1, 2, 3],
        error=ErrorClass.DISCONNECT,
        error_detail="cut",
        tool_calls=[{"id": "c"}],
    )
    with RunStore(store_path) as store:
        run = store.create_run("bench", {"servelab_version": "x"})
        store.add_record(run, record)
        store.put_summary(run, "x1", {"ok": 0})
        store.finish_run(run)
        assert store.records(run) == [record]
        data = export_run(store, run[:10])
    assert data["schema"] == "servelab.run" and data["schema_version"] == 2
    assert data["run"]["status"] == "complete"
    assert data["records"][0]["error"] == "disconnect"
    RunExport.model_validate(json.loads(json.dumps(data)))


def test_unknown_run_is_a_clear_error(store_path: Path) -> None:
    with RunStore(store_path) as store, pytest.raises(StoreError, match="no run 'nope'"):
        store.get_run("nope")


def test_latest_of_a_kind_is_the_newest_run_of_that_kind(store_path: Path) -> None:
    """A sweep stores a bench run per point after itself: "latest" for a sweep is the sweep, not the newest run."""
    with RunStore(store_path) as store:
        alone = store.create_run("bench", {})
        sweep = store.create_run("sweep", {})
        benches = [store.create_run("bench", {"args": {"sweep_point": f"point-{i}"}}) for i in range(3)]
        assert store.get_run("latest").run_id == sweep  # the sweep's points are its parts, named by id
        assert store.get_run("latest", kinds=("bench",)).run_id == alone
        assert store.get_run(benches[1]).run_id == benches[1]
        check = store.create_run("check", {})
        store.create_run("coexist", {"args": {"check_step": "coexist"}})  # a check's step, stored after it
        assert store.get_run("latest").run_id == check
        assert store.get_run(sweep[:22], kinds=("sweep",)).run_id == sweep
        with pytest.raises(UsageError, match=f"run {benches[0]} is a bench run, not a sweep run"):
            store.get_run(benches[0], kinds=("sweep",))
        with pytest.raises(StoreError, match=r"no run 'latest' \(coexist\)"):
            store.get_run("latest", kinds=("coexist",))


def test_documented_schema_is_current() -> None:
    documented = json.loads((DOCS / "run-export.schema.json").read_text())
    assert documented == json_schema(), "regenerate: python -m servelab.core.export > docs/run-export.schema.json"


WRITER = """
import sys, time
from servelab.core.records import RequestRecord
from servelab.core.store import RunStore
store = RunStore(sys.argv[1])
run = store.create_run("killed", {})
print(run, flush=True)
for i in range(10_000):
    store.add_record(run, RequestRecord(request_id=f"r{i}", endpoint="chat", chunk_ns=[i]))
    time.sleep(0.01)
"""


def test_a_killed_run_keeps_what_it_wrote(store_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(store_path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    run = proc.stdout.readline().strip()
    deadline = time.monotonic() + 30
    with RunStore(store_path) as reader:
        while len(reader.records(run)) < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        records = reader.records(run)
        info = reader.get_run(run)
    assert len(records) >= 20
    assert [r.request_id for r in records] == [f"r{i}" for i in range(len(records))]
    assert info.status == STATUS_RUNNING and info.finished_at is None


def test_tests_run_with_an_isolated_home_and_store(isolated_home: Path, isolated_store: Path) -> None:
    """The autouse fixtures: a test's default store and servelab home are never the user's."""
    from servelab.core.paths import servelab_home
    from servelab.core.store import default_store_path

    assert servelab_home() == isolated_home and default_store_path() == isolated_store
    assert Path.home() / ".servelab" not in (isolated_home, isolated_store.parent)
    assert (isolated_home / "models").is_symlink()  # the converted model is shared, nothing else


def test_a_copy_of_the_file_alone_keeps_every_stored_result(tmp_path: Path) -> None:
    """The GPU host's packing copied runs.sqlite without its -wal and lost a killed sweep's points (2026-12-06):
    a result and a finish are checkpointed into the file, so the file alone holds them while the store is open."""
    store = RunStore(tmp_path / "runs.sqlite")
    kept, finished = store.create_run("sweep", {}), store.create_run("bench", {})
    store.put_result(kept, "sweep", 1, '{"points": [1, 2, 3]}')
    store.finish_run(finished)
    copy = tmp_path / "copy.sqlite"
    shutil.copyfile(tmp_path / "runs.sqlite", copy)  # the store still open, its -wal left behind
    with RunStore(copy) as read:
        assert read.result(kept) == ("sweep", 1, '{"points": [1, 2, 3]}')
        assert read.get_run(finished).status == "complete"
    store.close()
