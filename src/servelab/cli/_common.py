"""Bits the commands share: consoles, the store, JSON output."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from servelab.core.errors import UsageError
from servelab.core.results import RunResult
from servelab.core.store import RunStore
from servelab.report import print_section, section

StoreOption = typer.Option(None, "--store", help="Run store file (default: $SERVELAB_HOME/runs.sqlite).")
JsonOption = typer.Option(False, "--json", help="Print JSON for a machine instead of tables.")


_CONSOLES: list[Console] = []


def console() -> Console:
    """The one console of this invocation (made by :func:`servelab.cli.main`, or here on first use)."""
    if not _CONSOLES:
        _CONSOLES.append(Console(highlight=False))
    return _CONSOLES[-1]


@contextmanager
def using_console(out: Console) -> Iterator[Console]:
    """Every command inside writes to ``out`` (a test gives a recording console of a fixed width)."""
    _CONSOLES.append(out)
    try:
        yield out
    finally:
        _CONSOLES.remove(out)


def open_store(path: Path | None) -> RunStore:
    return RunStore(path)


def print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, default=str))


def parse_target(spec: str) -> tuple[str, str]:
    """``NAME=URL`` → (name, url), with a clear message for anything else."""
    name, sep, url = spec.partition("=")
    if not sep or not name or not url.startswith(("http://", "https://")):
        raise UsageError(f"--target wants NAME=URL (like local=http://127.0.0.1:8000), got {spec!r}")
    return name, url


RUN_FIELDS = frozenset({"kind", "version", "status", "error", "warnings"})


def result_json(result: RunResult | None) -> dict[str, Any]:
    """A typed result's own figures as JSON (the run's kind, status and warnings are said beside them)."""
    return {} if result is None else result.model_dump(mode="json", exclude=set(RUN_FIELDS))


def show_run(db: RunStore, run_id: str) -> None:
    """A stored run at the terminal, rendered from its typed result like the report renders it (no plots)."""
    print_section(console(), section(db, db.get_run(run_id), with_plots=False))
