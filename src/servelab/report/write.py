"""A report file from stored runs: HTML (self-contained) or Markdown."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from servelab.core.store import RunStore
from servelab.report.document import build_report
from servelab.report.model import Section
from servelab.report.render import to_html, to_markdown
from servelab.report.sections import section


def build_sections(store: RunStore, run_ids: Sequence[str]) -> list[Section]:
    return [section(store, store.get_run(r)) for r in run_ids]


def report_text(store: RunStore, run_ids: Sequence[str], *, markdown: bool = False, notes: Sequence[str] = ()) -> str:
    """The report of ``run_ids`` (a check with its steps; none: the newest run or its check) as HTML or Markdown."""
    report = build_report(store, run_ids, notes, with_plots=not markdown)
    return to_markdown(report) if markdown else to_html(report)


def write_report(
    store: RunStore, run_ids: Sequence[str], out: Path, *, markdown: bool = False, notes: Sequence[str] = ()
) -> Path:
    text = report_text(store, run_ids, markdown=markdown, notes=notes)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return out
