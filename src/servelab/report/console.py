"""Rich output for a person at a terminal: a stored run's section, a step's figures."""

from __future__ import annotations

import math
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from servelab.core.figures import stored_figure
from servelab.core.summary import PER_REQUEST
from servelab.report.model import Section
from servelab.report.model import Table as Figures


def fmt(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def summary_table(title: str, s: dict[str, Any]) -> Table:
    """One level's figures: TTFT, inter-chunk gaps, TPOT, tok/s, errors."""
    table = Table("figure", "p50", "p90", "p99", title=f"{title}: {s['ok']}/{s['requests']} ok", title_justify="left")
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
        table.add_row(label, *(stored_figure(row, p, n, top.get(key)).text() for p in ("p50", "p90", "p99")))
    table.caption = (
        f"aggregate {fmt(s.get('aggregate_tok_s'))} tok/s over the active window {fmt(s.get('active_window_s'), 2)} s; "
        f"{s.get('output_tokens', 0)} output tokens; {s.get('samples', {}).get('itl', 0)} gaps"
        + (f"; errors {s['errors']}" if s.get("errors") else "")
    )
    return table


def rich_table(t: Figures, width: int | None = None) -> Table:
    """A report table as a rich table (a cell's lines kept; the note as the caption). Where its lines would be wider
    than ``width``, each column is as narrow as its longest word and its cells wrap at spaces: nothing is cut."""
    table = Table(title=t.caption, title_justify="left", caption=t.note or None, caption_justify="left",
                  box=box.SIMPLE_HEAD, collapse_padding=True, pad_edge=False)  # fmt: skip
    columns = list(zip(t.headers, *t.rows, strict=False)) if t.rows else [(h,) for h in t.headers]
    natural = sum(max(len(line) for cell in col for line in cell.split("\n")) + 2 for col in columns)
    narrow = width is not None and natural > width
    for col in columns:
        longest = max((len(word) for cell in col for word in cell.split()), default=1)
        header = max((len(word) for word in col[0].split()), default=1)
        table.add_column(col[0], min_width=header, max_width=longest if narrow else None, overflow="fold")
    for row in t.rows:
        table.add_row(*row)
    return table


def section_tables(section: Section, width: int | None = None) -> list[Table]:
    return [rich_table(t, width) for t in section.tables]


def print_section(console: Console, section: Section, *, heading: bool = True) -> None:
    """A stored run for a person at a terminal: what it was, its tables, its verdicts, what went wrong."""
    if heading:
        console.print(f"[bold]{section.title}[/] ({section.status})")
    for name, value in section.facts:
        console.print(f"[dim]{name}: {value}[/]")
    for table in section_tables(section, console.width):
        console.print(table)
    for line in section.verdicts:
        console.print(line)
    for problem in section.problems:
        console.print(f"[yellow]warning:[/] {problem}")
