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
from servelab.core.store import RunStore

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
