"""Bits the commands share: consoles, the store, JSON output."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from servelab.core.errors import ServelabError, UsageError
from servelab.core.results import RunResult
from servelab.core.store import RunStore
from servelab.core.terminal import make_console, styled
from servelab.load import Target, described, resolve_all, target_specs
from servelab.report import print_section, section

StoreOption = typer.Option(None, "--store", help="Run store file (default: $SERVELAB_HOME/runs.sqlite).")
JsonOption = typer.Option(False, "--json", help="Print JSON for a machine instead of tables.")
ModelOption = typer.Option(
    [], "--model", help="The model to ask (default: the first the server lists); NAME=MODEL for one target; repeat."
)
ApiKeyOption = typer.Option(
    [], "--api-key", help="The server's API key (default: $OPENAI_API_KEY); NAME=KEY for one target; repeat."
)


def finite(**options: float | None) -> None:
    """Refuse NaN and infinity in float options (click's float type and its ranges let both through), each named
    by its flag: ``finite(rate=rate)`` for ``--rate``."""
    for name, value in options.items():
        if value is not None and not math.isfinite(value):
            raise UsageError(f"--{name.replace('_', '-')} wants a finite number, got {value}")


_CONSOLES: list[Console] = []


def console() -> Console:
    """The one console of this invocation (made by :func:`servelab.cli.main`, or here on first use)."""
    if not _CONSOLES:
        _CONSOLES.append(make_console())
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


RUN_FIELDS = frozenset({"kind", "version", "status", "error", "warnings"})


def result_json(result: RunResult | None) -> dict[str, Any]:
    """A typed result's own figures as JSON (the run's kind, status and warnings are said beside them)."""
    return {} if result is None else result.model_dump(mode="json", exclude=set(RUN_FIELDS))


def show_run(db: RunStore, run_id: str) -> None:
    """A stored run at the terminal, rendered from its typed result like the report renders it (no plots)."""
    print_section(console(), section(db, db.get_run(run_id), with_plots=False))


def refuse_failed(result: RunResult | None) -> None:
    """Requests that failed fail the command (after its output): no figure may rest on them unnoticed."""
    failed = [] if result is None else result.request_failures()
    if failed:
        raise ServelabError(
            "requests failed: " + "; ".join(failed),
            hint="the figures above count only the requests that succeeded; every record is stored with the run",
        )


def targets_from(
    target: list[str],
    model: list[str],
    api_key: list[str],
    *,
    quiet: bool,
    needed_by: str | None = None,
    hint: str | None = None,
) -> list[Target]:
    """The targets resolved against their servers (``OPENAI_BASE_URL`` when none is given); each printed with the
    model it will be asked, unless ``quiet``. ``needed_by``: the command that cannot run without one."""
    specs = target_specs(target, model, api_key)
    if not specs and needed_by:
        raise UsageError(f"{needed_by} needs at least one --target NAME=URL (or OPENAI_BASE_URL)", hint=hint)
    targets = resolve_all(specs)
    if not quiet:
        for t in targets:
            console().print(styled(f"target {described(t)}", "dim"))
    return targets
