"""`servelab compare`: two stored bench runs of one kind side by side, the second against the first (speed ratio,
TTFT difference), the settings that differ and a server busy with other clients said; other kinds refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.bench import compare_runs
from servelab.cli import main
from servelab.core.errors import UsageError
from servelab.core.recorder import recording
from servelab.core.records import RequestRecord
from servelab.core.results import BenchRun
from servelab.core.store import RunStore
from servelab.report import compare_table

MS = 1_000_000


def _record(i: int, ttft_ms: float, gap_ms: float) -> RequestRecord:
    sent = i * 1000 * MS
    first = sent + int(ttft_ms * MS)
    chunks = [first + int(k * gap_ms * MS) for k in range(10)]
    return RequestRecord(request_id=f"r{i}", endpoint="chat", scenario="chat", target="t", sent_ns=sent,
                         first_token_ns=first, first_content_ns=first, chunk_ns=chunks, end_ns=chunks[-1],
                         completion_tokens=10, client_token_count=10)  # fmt: skip


def _bench(store: RunStore, ttft_ms: float, gap_ms: float, max_tokens: int, warnings: list[str]) -> str:
    manifest = {"kind": "bench", "args": {"requests": 5}, "load": {"max_tokens": max_tokens, "concurrency": None}}
    with recording(store, "bench", manifest) as run:
        for i in range(5):
            run.sink(_record(i, ttft_ms + i, gap_ms))
        run.result(BenchRun(warnings=warnings))
    return run.run_id


def test_two_runs_side_by_side_with_what_differs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with RunStore(tmp_path / "s.sqlite") as store:
        a = _bench(store, 100, 20, 64, [])
        b = _bench(store, 150, 10, 128, ["t/chat: t's /metrics counted 9 requests running ... other clients ..."])
        got = compare_runs(store, a, b)
        with recording(store, "eval", {}) as other:
            pass
        with pytest.raises(UsageError, match="is a eval run"):
            compare_runs(store, a, other.run_id)
    assert got.first == a and got.second == b
    assert "the runs differ in max_tokens: 64 vs 128" in got.warnings
    assert any(w.startswith(f"{b}: ") and "other clients" in w for w in got.warnings)
    assert len(got.rows) == 1
    table = compare_table(got.rows, "x")
    assert table.headers[-1] == f"{b[-6:]}:t\nagainst {a[-6:]}:t"
    speed, ttft, aggregate = table.rows[0][-1].split("\n")
    assert speed == "x2.00" and ttft == "+50.0 ms"  # half the gap: twice the speed; TTFT 50 ms later
    assert aggregate.startswith("x")
    assert main(["compare", a, b, "--store", str(tmp_path / "s.sqlite")]) == 0
    assert "the runs differ in max_tokens" in " ".join(capsys.readouterr().out.split())
