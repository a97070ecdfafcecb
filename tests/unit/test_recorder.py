"""The one run recorder: records stored as they finish, complete at the end of the block, failed with what stopped
it when the block raises, interrupted on Ctrl-C (what was measured stays either way), said by `servelab runs list`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servelab.cli import main
from servelab.core.recorder import recording
from servelab.core.records import RequestRecord
from servelab.core.store import STATUS_COMPLETE, STATUS_FAILED, STATUS_INTERRUPTED, RunStore


def record(n: int) -> RequestRecord:
    return RequestRecord(request_id=f"r{n}", endpoint="chat", scenario="s", target="t", model="m")


def test_a_block_that_ends_completes_the_run(store_path: Path) -> None:
    seen: list[str] = []
    with RunStore(store_path) as store:
        with recording(store, "bench", {"kind": "bench"}, on_record=lambda r: seen.append(r.request_id)) as run:
            run.sink(record(0))
            run.summary("x", {"n": 1})
        info = store.get_run(run.run_id)
        assert (info.status, info.error, info.record_count) == (STATUS_COMPLETE, None, 1)
        assert store.summaries(run.run_id) == {"x": {"n": 1}} and seen == ["r0"]


@pytest.mark.parametrize("raised", [ValueError("the engine said no"), KeyboardInterrupt()])
def test_a_block_that_raises_fails_the_run_and_keeps_what_it_measured(store_path: Path, raised: BaseException) -> None:
    with RunStore(store_path) as store:
        with pytest.raises(type(raised)), recording(store, "eval", {}) as run:
            run.sink(record(0))
            run.sink(record(1))
            raise raised
        info = store.get_run(run.run_id)
    assert info.record_count == 2
    if isinstance(raised, ValueError):
        assert (info.status, info.error) == (STATUS_FAILED, "ValueError: the engine said no")
    else:  # Ctrl-C is no failure of the run: it was stopped
        assert (info.status, info.error) == (STATUS_INTERRUPTED, "interrupted (Ctrl-C)")


def test_runs_list_says_why_a_run_failed(store_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with RunStore(store_path) as store, pytest.raises(RuntimeError), recording(store, "coexist", {}):
        raise RuntimeError("probe died")
    assert main(["runs", "list", "--json", "--store", str(store_path)]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert listed["status"] == STATUS_FAILED and listed["error"] == "RuntimeError: probe died"
