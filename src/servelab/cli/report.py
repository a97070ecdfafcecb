"""`servelab report`: stored runs side by side in one self-contained HTML file, or Markdown."""

from __future__ import annotations

from pathlib import Path

import typer

from servelab.cli._common import StoreOption, console, open_store
from servelab.report import write_report


def report(
    runs: list[str] = typer.Argument(None, help="Run ids (or prefixes, or 'latest'); none: the latest run."),
    out: Path | None = typer.Option(None, "--out", help="Where to write (default report.html, or report.md)."),
    markdown: bool = typer.Option(False, "--markdown", help="Markdown for an issue or a post, instead of HTML."),
    store: Path | None = StoreOption,
) -> None:
    """A self-contained report of stored runs: tables side by side, plots, verdicts, manifests."""
    target = out or Path("report.md" if markdown else "report.html")
    with open_store(store) as db:
        path = write_report(db, runs or ["latest"], target, markdown=markdown)
    console().print(f"report: {path.resolve()}")
