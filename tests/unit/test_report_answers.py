"""The report of stored runs measured against the fake engine (tests/fixtures/stored_runs.py): a check and a
two-target bench of 3 requests a step. The answer tables come first in the seeds' shapes, each verdict is said once,
figures the samples cannot support say so, and ``report`` with no run takes the whole check."""

from __future__ import annotations

import re
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest
from rich.console import Console

from servelab.cli import main
from servelab.core.store import RunStore
from servelab.report import build_report, print_summary, report_runs, report_text
from tests.fixtures import stored_runs


@pytest.fixture(scope="module")
def check_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("check") / "runs.sqlite"
    stored_runs.check(path)
    return path


@pytest.fixture(scope="module")
def bench_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bench") / "runs.sqlite"
    stored_runs.two_target_bench(path, requests=3)
    return path


class Texts(HTMLParser):
    """The text of every list item, summary and table cell, and the verdicts' own texts."""

    TAGS = ("li", "summary", "td", "p", "figcaption")

    def __init__(self) -> None:
        super().__init__()
        self.open: list[tuple[str, list[str]]] = []
        self.texts: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.TAGS:
            self.open.append((tag, []))

    def handle_endtag(self, tag: str) -> None:
        if tag in self.TAGS and self.open and self.open[-1][0] == tag:
            _, parts = self.open.pop()
            self.texts.append((tag, " ".join("".join(parts).split())))

    def handle_data(self, data: str) -> None:
        if self.open:
            self.open[-1][1].append(data)


def test_report_with_no_run_takes_the_check_not_its_last_step(check_store: Path) -> None:
    with RunStore(check_store) as db:
        runs = {r.kind: r.run_id for r in db.list_runs()}
        assert db.list_runs()[0].kind == "coexist"  # the newest run is the check's last step ...
        assert db.get_run("latest").kind == "check"  # ... a part of the check: "latest" is the check
        shown = report_runs(db, [])  # ... the report is of the check, with every step
        assert report_runs(db, [runs["check"]]) == shown
    assert shown == [runs[k] for k in ("check", "plan", "bench", "eval", "coexist")]


def test_no_verdict_is_repeated_in_the_report_of_a_check(check_store: Path) -> None:
    with RunStore(check_store) as db:
        report = build_report(db, [])
        html = report_text(db, [])
    parser = Texts()
    parser.feed(html)
    verdicts = [v for s in report.sections for v in s.verdicts]
    assert len(verdicts) >= 6 and len(set(verdicts)) == len(verdicts)
    summaries = Counter(text for tag, text in parser.texts if tag in ("li", "summary"))
    for v in verdicts:  # each verdict is one list item (or its summary), and nowhere else in the page
        assert summaries[" ".join(v.split())] == 1, v
        assert html.count(v.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")) == 1, v
    repeated = [t for t, k in Counter(t for tag, t in parser.texts if tag != "td" and len(t) > 30).items() if k > 1]
    assert not repeated
    steps = next(s for s in report.sections if s.kind == "check")
    assert not steps.verdicts  # said by the steps' own sections, which the check's table links to
    for s in report.sections[1:]:
        assert f'<a href="#run-{s.run_id}">{s.run_id}</a>' in html and f'<section id="run-{s.run_id}">' in html


def test_the_answer_tables_come_first_in_the_seeds_shapes(check_store: Path) -> None:
    with RunStore(check_store) as db:
        report = build_report(db, [], with_plots=False)
        html = report_text(db, [])
    captions = [t.caption for t in report.answers]
    assert captions[0] == "Configuration" and captions[1].startswith("Fit: llama-3.1-8b on h100-80gb")
    assert captions[2:] == [
        "Speed: tok/s per stream and TTFT",
        "Capability by axis",
        "Beside the LLM, by layer (scripted)",
    ]
    fit = report.answers[1]
    assert [row[0] for row in fit.rows] == ["weights", "engine overhead", "KV cache", "co-tenants", "free",
                                            "sessions at the context"]  # fmt: skip
    assert sum(share for _, share in fit.bar) == pytest.approx(1.0)
    assert [row[0] for row in report.answers[2].rows] == [
        "code-chat",
        "character-chat",
        "studio-enhance",
        "concurrent-4",
    ]
    assert report.answers[3].headers == ["axis", "fast\nstrict · semantic", "slow\nstrict · semantic"]
    assert [row[0] for row in report.answers[4].rows] == ["alone", "decode"]
    answer, verdicts = html.index('id="answer"'), html.index('id="verdicts"')
    first_section = html.index("<section")
    assert answer < verdicts < first_section and html.index("Every step") > first_section


def test_three_requests_a_step_say_too_few_instead_of_p99s(bench_store: Path) -> None:
    with RunStore(bench_store) as db:
        report = build_report(db, [])
        html = report_text(db, [])
    (bench,) = report.sections
    steps = next(t for t in bench.tables if t.caption == "Every step")
    for row in steps.rows:
        assert row[1] == "3/3"
        for cell in (row[2], row[4], row[5]):  # TTFT, TPOT, E2E: one sample a request, 3 of them
            assert "/max " in cell and cell.endswith("(n=3)"), cell  # the largest of 3, not a p99
        if "(n=" in row[3]:  # ITL: a p99 only where the gaps support one, else the largest with their count
            assert "/max " in row[3] and int(row[3].rsplit("(n=", 1)[1].rstrip(")")) < 100, row[3]
    side = next(t for t in bench.tables if t.caption == "Side by side")
    assert not any("[" in cell for row in side.rows for cell in row[1:3])  # no interval from 3 requests
    assert not any(p.caption == "Time to first token" for p in bench.plots)
    assert any(n.startswith("Time to first token: no plot for") and "(n=3)" in n for n in bench.not_drawn)
    assert "too few samples to draw a distribution" in html
    speed = report.answers[1]
    assert all(row[3] == "too few to tell\n(n=3 and 3)" for row in speed.rows)  # not "within the noise"
    assert "too few requests to judge what limited any step (n=3)" in " ".join(bench.verdicts)


def test_the_markdown_is_the_seed_000_tables_and_the_verdicts(
    bench_store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", "--markdown", "--store", str(bench_store)]) == 0
    md = capsys.readouterr().out
    assert "**Speed: tok/s per stream and TTFT**" in md and "| task | fast | slow | difference |" in md
    for scenario in ("code-chat", "character-chat", "studio-enhance", "concurrent-4"):
        row = next(line for line in md.splitlines() if line.startswith(f"| {scenario} |"))
        assert re.search(r"\| [\d.,]+ tok/s<br>TTFT \d+ ms(<br>[\d.,]+ tok/s aggregate)?<br>n=3 \|", row), row
    assert "tok/s aggregate" in next(line for line in md.splitlines() if line.startswith("| concurrent-4 |"))
    assert "- **bench:** fast streams at" in md
    for evidence in ("Every step", "Where the ceiling was", "Manifest", "plot", "<details>"):
        assert evidence not in md, evidence


def test_the_check_summary_at_a_terminal_says_each_verdict_once(check_store: Path) -> None:
    out = Console(width=80, record=True, color_system=None)
    with RunStore(check_store) as db:
        report = build_report(db, [], with_plots=False)
        print_summary(out, report)
    text = out.export_text()
    flat = " ".join(text.split())
    assert "The steps of the check" in text and "Speed: tok/s per stream and TTFT" in text
    for v in (v for s in report.sections for v in s.verdicts):
        assert flat.count(" ".join(v.split())) == 1, v
    assert max(len(line) for line in text.splitlines()) <= 80
