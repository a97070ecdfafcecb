"""A report file from stored runs: one section per run, HTML (self-contained) or Markdown."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from servelab.core.store import RunStore
from servelab.report.model import Section
from servelab.report.render import to_html, to_markdown
from servelab.report.sections import section


def build_sections(store: RunStore, run_ids: Sequence[str]) -> list[Section]:
    return [section(store, store.get_run(r)) for r in run_ids]


def write_report(
    store: RunStore, run_ids: Sequence[str], out: Path, *, markdown: bool = False, notes: Sequence[str] = ()
) -> Path:
    sections = build_sections(store, run_ids)
    text = to_markdown(sections, notes=notes) if markdown else to_html(sections, notes=notes)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return out
