"""`servelab runs list|show|export`: what the run store holds."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import typer
from rich.table import Table

from servelab.cli._common import JsonOption, StoreOption, console, open_store, print_json
from servelab.core.export import export_run
from servelab.core.results import load_result
from servelab.core.terminal import line, styled
from servelab.report import print_section, section

app = typer.Typer(help="Stored runs: list, show, export.", no_args_is_help=True)


def _when(ts: float | None) -> str:
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if ts else "-"


@app.command("list")
def list_runs(
    store: Path | None = StoreOption,
    limit: int = typer.Option(20, min=1, help="Newest N runs."),
    json_out: bool = JsonOption,
) -> None:
    """The newest runs, one line each."""
    with open_store(store) as db:
        runs = db.list_runs(limit=limit)
    if json_out:
        print_json(
            [
                {
                    "run_id": r.run_id,
                    "kind": r.kind,
                    "created_at": r.created_at,
                    "status": r.status,
                    "error": r.error,
                    "records": r.record_count,
                }
                for r in runs
            ]
        )
        return
    table = Table("run", "kind", "started", "status", "records")
    for r in runs:
        status = f"{r.status}: {r.error}" if r.error else r.status
        table.add_row(r.run_id, r.kind, _when(r.created_at), status, str(r.record_count))
    console().print(table)


@app.command()
def show(
    run_id: str = typer.Argument("latest", help="A run id, a unique prefix of one, or 'latest'."),
    store: Path | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """The run as the report shows it: its tables, verdicts and problems (--json: its typed result)."""
    with open_store(store) as db:
        info = db.get_run(run_id)
        summaries = db.summaries(info.run_id)
        result = load_result(db, info)
        if json_out:
            print_json(
                {
                    "run_id": info.run_id,
                    "kind": info.kind,
                    "status": info.status,
                    "error": info.error,
                    "records": info.record_count,
                    "manifest": info.manifest,
                    "result": None if result is None else result.model_dump(mode="json"),
                    "summaries": summaries,
                }
            )
            return
        out = console()
        out.print(line((info.run_id, "bold"), f"  {info.kind}  {info.status}  {info.record_count} records  "
                       f"started {_when(info.created_at)}"))  # fmt: skip
        print_section(out, section(db, info, with_plots=False), heading=False)
    if summaries and result is not None:
        out.print(styled(f"kept beside the result: {', '.join(summaries)} (servelab runs export {info.run_id})", "dim"))


@app.command()
def export(
    run_id: str = typer.Argument("latest", help="A run id, a unique prefix of one, or 'latest'."),
    store: Path | None = StoreOption,
    out: Path | None = typer.Option(None, "--out", "-o", help="Write to this file instead of stdout."),
    json_out: bool = typer.Option(True, "--json", help="JSON (the only format, schema servelab.run v1)."),
) -> None:
    """The whole run as versioned JSON (schema: docs/run-export.md)."""
    with open_store(store) as db:
        data = export_run(db, run_id)
    text = json.dumps(data, indent=2)
    if out is None:
        typer.echo(text)
    else:
        out.write_text(text + "\n")
        console().print(f"wrote {out} ({len(data['records'])} records)")
