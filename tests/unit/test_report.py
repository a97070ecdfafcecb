"""The report's writers: self-contained HTML (nothing fetched, plots inline, what failed on top, each verdict once
with its evidence folded beneath) and Markdown (the answer tables and the short verdicts, nothing else)."""

import base64
import html
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from servelab.coexist import CoexistOptions, run_coexist
from servelab.core.store import RunStore
from servelab.report import build_sections, write_report
from servelab.report.document import assemble
from servelab.report.model import Plot, Section, Table, can_differ, say
from servelab.report.render import md_escape, to_html, to_markdown
from tests.unit.coexist.test_run import ScriptedProbe

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def section(status: str = "complete", run_id: str = "r1") -> Section:
    s = Section(run_id, "bench", f"bench {run_id}", status, {"servelab_version": "x"})
    s.tables.append(Table("speeds", ["scenario", "a | b"], [["code-chat", "1.0 [0.9, 1.1]"]]))
    s.plots.append(Plot("TTFT", PNG))
    say(s, f"{run_id}: a streams at 1.20x the speed of b", "code-chat: 1.20x (outside the noise; n=40 and 40)")
    return s


def test_html_is_self_contained_and_puts_failures_first() -> None:
    failed = section("failed", "r2")
    failed.problems.append("the run ended failed")
    text = to_html(assemble([section(), failed], notes=["eval: target died"]))
    assert "data:image/png;base64," in text and "<script" not in text and 'src="http' not in text
    top = text.split('<section id="run-r1">')[0]
    assert "What failed" in top and "eval: target died" in top and "the run ended failed" in top
    assert "<summary>r1: a streams at 1.20x the speed of b</summary>" in top  # the verdict leads, its evidence folded
    assert text.count("the run ended failed") == 1  # said at the top, not again in its section


def test_a_verdict_said_twice_is_shown_once() -> None:
    first, second = section(run_id="r1"), section(run_id="r2")
    say(second, "r1: a streams at 1.20x the speed of b")
    text = to_html(assemble([first, second]))
    assert text.count("r1: a streams at 1.20x the speed of b") == 1


def test_markdown_is_the_answer_tables_and_the_verdicts_only() -> None:
    s = section()
    s.facts.append(("hardware", "no GPU"))
    s.problems.append("a warning that is not a failure")
    report = assemble([s], notes=["bench: died"])
    report.answers.append(Table("Speed", ["task", "a | b"], [["code-chat", "1.0"]], note="medians"))
    md = to_markdown(report)
    assert "| task | a \\| b |" in md and "**failed:** bench: died" in md
    assert "- **bench:** r1: a streams at 1.20x the speed of b" in md
    for elsewhere in ("speeds", "TTFT", "n=40", "no GPU", "a warning", "Manifest"):  # evidence, plots, sections
        assert elsewhere not in md, elsewhere


def test_user_text_is_escaped_in_html_and_markdown() -> None:
    name = "<b>x</b>|[bold]:100:*_"
    s = Section("r1", "bench", "bench r1", "complete")
    say(s, f"{name}: fits", f"because {name}")
    s.tables.append(Table(name, [name], [[name]]))
    report = assemble([s])
    report.answers.append(Table(name, ["target"], [[name]]))
    text, md = to_html(report), to_markdown(report)
    assert "<b>x</b>" not in text and "&lt;b&gt;x&lt;/b&gt;|[bold]:100:*_" in text
    assert md_escape(name) == "\\<b\\>x\\</b\\>\\|\\[bold\\]`:100:`\\*\\_" and md_escape(name) in md


def test_two_samples_too_small_cannot_differ() -> None:
    assert not can_differ(3, 3) and can_differ(4, 4) and not can_differ(0, 40) and can_differ(2, 40)


def test_a_stored_coexist_run_becomes_a_section(tmp_path: Path) -> None:
    with RunStore(tmp_path / "s.sqlite") as db:
        run = run_coexist(db, ScriptedProbe(), None, CoexistOptions(conditions=("alone",), repeats=1, utterances=2))
        (sec,) = build_sections(db, [run.run_id])
        out = write_report(db, ["latest"], tmp_path / "r.md", markdown=True)
    assert sec.kind == "coexist" and sec.tables[0].rows[0][0] == "alone"
    assert "rests on 40 chunks" in " ".join(sec.problems)
    assert len(sec.plots) == 1 and not sec.not_drawn  # 38 intervals: enough to draw, with their band
    assert "Beside the LLM, by layer (scripted)" in out.read_text()


VERDICT = st.text(alphabet="ab :|<>&[]/*_-1", min_size=1, max_size=12).map(lambda t: f"v {t.strip()}")


@given(st.lists(st.lists(VERDICT, max_size=5), min_size=1, max_size=4))
def test_every_verdict_is_one_item_of_the_page_however_the_runs_repeat_them(said: list[list[str]]) -> None:
    sections = []
    for i, verdicts in enumerate(said):
        s = Section(f"r{i}", "bench", f"bench r{i}", "complete")
        for v in verdicts:
            say(s, v, f"evidence of {v}")
        sections.append(s)
    text = to_html(assemble(sections))
    for v in {v for verdicts in said for v in verdicts}:
        assert text.count(f"<summary>{html.escape(v)}</summary>") == 1, v
