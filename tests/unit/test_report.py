"""The report's writers: self-contained HTML (nothing fetched, plots inline, what failed on top) and Markdown."""

import base64
from pathlib import Path

from servelab.coexist import CoexistOptions, run_coexist
from servelab.core.store import RunStore
from servelab.report import build_sections, write_report
from servelab.report.model import Plot, Section, Table
from servelab.report.render import to_html, to_markdown
from tests.unit.coexist.test_run import ScriptedProbe

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def section(status: str = "complete") -> Section:
    s = Section("r1", "bench", "bench r1", status, {"servelab_version": "x"})
    s.tables.append(Table("speeds", ["scenario", "a | b"], [["code-chat", "1.0 [0.9, 1.1]"]]))
    s.plots.append(Plot("TTFT", PNG))
    s.verdicts.append("code-chat: a streams at 1.20x the speed of b")
    return s


def test_html_is_self_contained_and_puts_failures_first() -> None:
    failed = section("failed")
    failed.problems.append("the run ended failed")
    text = to_html([section(), failed], notes=["eval: target died"])
    assert "data:image/png;base64," in text and "<script" not in text and 'src="http' not in text
    top = text.split('<section id="run-r1">')[0]
    assert "What failed" in top and "eval: target died" in top and "the run ended failed" in top
    assert "a streams at 1.20x" in top  # the verdicts lead


def test_markdown_escapes_pipes_and_names_plots() -> None:
    md = to_markdown([section()], notes=["bench: died"])
    assert "| scenario | a \\| b |" in md and "**failed:** bench: died" in md
    assert "plot in the HTML report: TTFT" in md


def test_a_stored_coexist_run_becomes_a_section(tmp_path: Path) -> None:
    with RunStore(tmp_path / "s.sqlite") as db:
        run = run_coexist(db, ScriptedProbe(), None, CoexistOptions(conditions=("alone",), repeats=1, utterances=2))
        (sec,) = build_sections(db, [run.run_id])
        out = write_report(db, ["latest"], tmp_path / "r.md", markdown=True)
    assert sec.kind == "coexist" and sec.tables[0].rows[0][0] == "alone" and len(sec.plots) == 1
    assert "rests on 40 chunks" in " ".join(sec.problems)
    assert "Probe scripted" in out.read_text()
