"""Rich output for a person at a terminal: a stored run's section, a step's figures."""

from __future__ import annotations

import math
from typing import Any

from rich.console import Console
from rich.text import Text

from servelab.core.figures import stored_figure
from servelab.core.grid import Grid
from servelab.core.summary import PER_REQUEST
from servelab.core.terminal import line, styled
from servelab.report.document import Report
from servelab.report.model import Section
from servelab.report.model import Table as Figures


def fmt(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def summary_table(title: str, s: dict[str, Any]) -> Grid:
    """One level's figures: TTFT, inter-chunk gaps, TPOT, tok/s, errors."""
    rows = []
    for label, key in (
        ("TTFT (ms)", "ttft_ms"),
        ("TTFT content (ms)", "ttft_content_ms"),
        ("TTFT from scheduled (ms)", "ttft_from_scheduled_ms"),
        ("inter-chunk gap (ms)", "itl_ms"),
        ("TPOT (ms)", "tpot_ms"),
        ("per-stream tok/s", "stream_tok_s"),
    ):
        row, top, short = s.get(key) or {}, s.get("maxima") or {}, key.removesuffix("_ms")
        n = (s.get("samples") or {}).get(short, s.get("ok") if short in PER_REQUEST else None)
        rows.append([label, *(stored_figure(row, p, n, top.get(key)).text() for p in ("p50", "p90", "p99"))])
    caption = (
        f"aggregate {fmt(s.get('aggregate_tok_s'))} tok/s over the active window {fmt(s.get('active_window_s'), 2)} s; "
        f"{s.get('output_tokens', 0)} output tokens; {s.get('samples', {}).get('itl', 0)} gaps"
        + (f"; errors {s['errors']}" if s.get("errors") else "")
    )
    return Grid(["figure", "p50", "p90", "p99"], rows, title=f"{title}: {s['ok']}/{s['requests']} ok", note=caption)


def rich_table(t: Figures, width: int | None = None) -> Grid:
    """A report table for the terminal, laid out by the grid rule (:mod:`servelab.core.grid`) at the width it is
    drawn: across when every column holds its widest word, else one block of ``header: value`` lines per row.
    ``width`` is not needed (the layout follows the console) and kept for callers that give it."""
    return Grid(t.headers, t.rows, title=t.caption, note=t.note)


def section_tables(section: Section, width: int | None = None) -> list[Grid]:
    return [rich_table(t, width) for t in section.tables]


def print_section(console: Console, section: Section, *, heading: bool = True) -> None:
    """A stored run for a person at a terminal: what it was, its tables, its verdicts, what went wrong (all of it
    plain text: a name or a server's words are never read as markup)."""
    if heading:
        console.print(line((section.title, "bold"), f" ({section.status})"))
    for name, value in section.facts:
        console.print(styled(f"{name}: {value}", "dim"))
    for table in section_tables(section, console.width):
        console.print(table)
    for verdict in section.verdicts:
        console.print(Text(verdict))
        if evidence := section.evidence.get(verdict):
            console.print(Text("\n".join(f"  {e}" for e in evidence.split("\n")), style="dim"))
    for problem in section.problems:
        console.print(line(("warning:", "yellow"), f" {problem}"))


def print_summary(console: Console, report: Report) -> None:
    """The report's first screen at a terminal: the answer tables, each verdict once (short; the evidence is in
    the report and ``servelab runs show``), what failed, and a check's steps."""
    for s in report.sections:
        if s.kind == "check":
            for table in section_tables(s, console.width):
                console.print(table)
    for answer in report.answers:
        console.print(rich_table(answer, console.width))
    for s in report.sections:
        if s.verdicts:
            console.print(line((s.kind, "bold"), " ", (s.run_id, "dim")))
            for verdict in s.verdicts:
                console.print(Text(f"  {verdict}"))
    for failure in report.failed:
        console.print(line(("failed:", "red"), f" {failure}"))
