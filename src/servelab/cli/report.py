"""`servelab report`: stored runs in one self-contained HTML file, or Markdown to paste (stdout by default)."""

from __future__ import annotations

from pathlib import Path

import typer

from servelab.cli._common import StoreOption, console, open_store
from servelab.report import report_text


def report(
    runs: list[str] = typer.Argument(
        None, help="Run ids (or prefixes, or 'latest'); a check brings its steps. None: the latest run, or its check."
    ),
    out: Path | None = typer.Option(None, "--out", help="Where to write (default report.html; Markdown: stdout)."),
    markdown: bool = typer.Option(False, "--markdown", help="The answer tables and verdicts as Markdown, to paste."),
    store: Path | None = StoreOption,
) -> None:
    """A self-contained report of stored runs: the answer first, each verdict once, then tables, plots, manifests."""
    with open_store(store) as db:
        text = report_text(db, runs or ["latest"], markdown=markdown)
    if markdown and out is None:
        typer.echo(text, nl=False)
        return
    target = out or Path("report.html")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    console().print(f"report: {target.resolve()}")
