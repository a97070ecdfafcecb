"""Ctrl-C, SIGTERM and SIGHUP stop a command the same way: the run is marked interrupted (not left "running"),
keeps what it measured and its side-by-side summary, and the CLI says which run and exits 128 + the signal.
Against the SSE fixture server (a bench that would otherwise run for a minute)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from servelab.core.results import BenchRun, load_result
from servelab.core.store import STATUS_INTERRUPTED, RunStore


@pytest.mark.parametrize(("sig", "code", "said"), [(signal.SIGTERM, 143, "interrupted by SIGTERM"),
                                                   (signal.SIGHUP, 129, "interrupted by SIGHUP"),
                                                   (signal.SIGINT, 130, "interrupted (Ctrl-C)")])  # fmt: skip
def test_a_signal_marks_the_run_interrupted_and_keeps_what_it_measured(
    fixture_server: str, tmp_path: Path, sig: signal.Signals, code: int, said: str
) -> None:
    store = tmp_path / "runs.sqlite"
    argv = [sys.executable, "-m", "servelab", "bench", "--target", f"fx={fixture_server}/schedule", "--scenario",
            "code-chat", "--requests", "500", "--max-tokens", "4", "--warmup", "0", "--store", str(store)]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.3)
        if store.exists():
            with RunStore(store) as db:
                runs = db.list_runs()
                if runs and runs[0].record_count >= 3:
                    break
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    with RunStore(store) as db:
        (run,) = db.list_runs()
        result = load_result(db, run)
    assert run.status == STATUS_INTERRUPTED and run.record_count >= 3
    assert run.error is not None and said in run.error
    assert isinstance(result, BenchRun) and result.status == STATUS_INTERRUPTED and result.error == run.error
    (row,) = result.rows  # the side-by-side of what was measured
    assert row.scenario == "code-chat" and row.cells["fx"].n == run.record_count
    assert said.split(" (")[0] in err and f"run {run.run_id} kept what it measured" in err
