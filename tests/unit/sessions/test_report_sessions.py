"""A session step in the report, from a run against the prefix-cache truth fixture (servelab.testing.cache_sim, a
timing/capacity fixture): each turn a row with its count, the verdict said once with the first turn against the
later ones, the two plots drawn, nothing above 100%, the same in the Markdown-free console."""

from __future__ import annotations

from html import escape
from pathlib import Path

import pytest

from servelab.bench import Load, run_bench
from servelab.core.store import RunStore
from servelab.load.runner import Target
from servelab.load.sessions import SessionSpec, of_spec
from servelab.report.document import build_report
from servelab.report.render import to_html

SIM = ["--base-ms", 2.0, "--per-token-ms", 0.5, "--step-ms", 0.5, "--capacity-blocks", 100_000]


@pytest.mark.parametrize("cache_sim", [SIM], indirect=True)
def test_a_session_step_reads_turn_by_turn(cache_sim: Target, tmp_path: Path) -> None:
    raw = {"name": "rep", "sessions": 2, "turns": 3, "head_tokens": 600, "turn_tokens": [40, 80],
           "output_tokens": [8, 16], "summary_tokens": 100}  # fmt: skip
    spec = SessionSpec.model_validate(raw)
    with RunStore(tmp_path / "s.sqlite") as db:
        result = run_bench(db, [cache_sim], [of_spec(spec)], Load(warmup=0))
        report = build_report(db, [result.run_id])
    figures = result.stored.steps[0].sessions
    assert figures is not None
    (section,) = report.sections
    table = next(t for t in section.tables if t.caption.startswith("Sessions: "))
    assert [row[0] for row in table.rows] == ["1", "2", "3"]
    assert all(row[1] == "2/2" and row[2].endswith("few (n=2)") for row in table.rows)  # no p95 from 2 turns
    assert all(row[5] == "-" or int(row[5].rstrip("%")) <= 100 for row in table.rows)
    said = [v for v in section.verdicts if "sessions, later turns" in v]
    assert len(said) == 1 and "cached" in said[0]
    first, later = figures.first_turn_ttft_ms_p50, figures.later_turn_ttft_ms_p50
    assert first is not None and later is not None and later < first  # the history found in the cache
    captions = [p.caption for p in section.plots]
    assert "TTFT against the prompt's length" in captions and "Prompt tokens found in the cache" in captions
    assert to_html(report).count(escape(said[0])) == 1  # said once, not again per section
