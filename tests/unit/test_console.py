"""Renderers at a fixed width, exactly: the console the CLI writes to is the one a test gives it."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from servelab.cli import main
from servelab.cli._common import console, using_console
from servelab.core.store import RunStore
from servelab.core.terminal import make_console
from servelab.report import build_sections, print_section, summary_table

SCHEMA2 = Path(__file__).parents[1] / "fixtures" / "store-schema2.sqlite"

SUMMARY = {
    "ok": 9, "requests": 10, "errors": 1, "output_tokens": 1280, "aggregate_tok_s": 1500.0, "active_window_s": 3.2,
    "samples": {"itl": 1270},  # a summary stored before every figure's count: TTFT, TPOT, tok/s at most 9 (ok)
    "ttft_ms": {"p50": 12.5, "p90": 20.0, "p99": 30.25},
    "itl_ms": {"p50": 5.0, "p90": 6.0, "p99": 9.5},
    "tpot_ms": {"p50": 5.1, "p90": 6.1, "p99": 9.6},
    "stream_tok_s": {"p50": 180.0, "p90": 200.0, "p99": 220.0},
}  # fmt: skip

EXPECTED = """\
local/chat@c4: 9/10 ok
figure                    p50    p90            p99
─────────────────────────────────────────────────────────────
TTFT (ms)                 12.5   too few (n=9)  too few (n=9)
TTFT content (ms)         -      -              -
TTFT from scheduled (ms)  -      -              -
inter-chunk gap (ms)      5.0    6.0            9.5
TPOT (ms)                 5.1    too few (n=9)  too few (n=9)
per-stream tok/s          180.0  too few (n=9)  too few (n=9)
aggregate 1,500.0 tok/s over the active window 3.20 s; 1280 output tokens; 1270
gaps; errors 1
"""


def recording_console(width: int = 80) -> Console:
    return make_console(width=width, record=True, file=io.StringIO(), color_system=None)


def test_a_summary_table_renders_exactly_at_80_columns() -> None:
    out = recording_console()
    out.print(summary_table("local/chat@c4", SUMMARY))
    assert [line.rstrip() for line in out.export_text().splitlines()] == EXPECTED.splitlines()


def test_the_cli_writes_to_the_console_it_is_given() -> None:
    with using_console(recording_console(60)) as out:
        assert console() is out
        assert main(["runs", "list"]) == 0  # the isolated, empty store
    text = out.export_text()
    assert text.split()[:4] == ["run", "kind", "started", "status"]
    assert console() is not out


@pytest.mark.parametrize("kind", ["bench", "bench-slo", "eval", "coexist", "plan"])
def test_every_kind_of_run_reads_at_80_columns(kind: str, tmp_path: Path) -> None:
    """The bench, eval and coexist tables (and the others) at 80 columns: no line wider, no header cut, no '…'."""
    store_path = tmp_path / "runs.sqlite"
    shutil.copy(SCHEMA2, store_path)
    with RunStore(store_path) as store:
        info = next(r for r in store.list_runs() if r.kind == kind)
        section = build_sections(store, [info.run_id])[0]
    out = recording_console(80)
    print_section(out, section)
    text = out.export_text()
    assert all(len(line) <= 80 for line in text.splitlines()), text
    assert "…" not in text
    words = " ".join(text.split())
    for table in section.tables:
        for header in table.headers:
            for word in header.split():
                assert word in words, (word, text)
