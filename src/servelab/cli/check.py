"""`servelab check`: the main job. Until the full check lands, a streamed smoke run."""

from __future__ import annotations

from pathlib import Path

import typer

from servelab.check.smoke import run_smoke
from servelab.cli._common import JsonOption, StoreOption, console, open_store, parse_target, print_json
from servelab.cli.engine import start_with_progress
from servelab.core.records import RequestRecord
from servelab.engines.embedded import EmbeddedEngine
from servelab.report.console import summary_table


def check(
    target: str | None = typer.Option(
        None,
        "--target",
        help="NAME=URL of an OpenAI-compatible server; none → the embedded engine, started and stopped here.",
    ),
    max_tokens: int = typer.Option(128, "--max-tokens", help="Output tokens per request."),
    keep_engine: bool = typer.Option(False, "--keep-engine", help="Leave the embedded engine running."),
    store: Path | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Run the main job: a streamed smoke run (1 then 4 streams), stored in the run store."""
    out = console()
    engine: EmbeddedEngine | None = None
    started_here = False
    if target is None:
        engine = EmbeddedEngine()
        state = start_with_progress(engine)
        started_here = not state.reused
        name, url = "embedded", state.url
        out.print(f"embedded engine {'reused' if state.reused else 'started'} at {url} (log {state.log})")
    else:
        name, url = parse_target(target)

    def show(record: RequestRecord) -> None:
        if not json_out:
            status = record.error.value if record.error else f"{record.completion_tokens} tokens"
            out.print(f"  {record.scenario}  {record.request_id}  {status}")

    try:
        with open_store(store) as db:
            result = run_smoke(db, url, target_name=name, max_tokens=max_tokens, on_record=show)
            store_path = db.path
    finally:
        if engine is not None and started_here and not keep_engine:
            engine.down()
    if json_out:
        print_json(
            {
                "run_id": result.run_id,
                "model": result.model,
                "levels": {str(k): v.to_dict() for k, v in result.levels.items()},
            }
        )
        return
    out.print(f"model {result.model} at {url}")
    for streams, summary in result.levels.items():
        out.print(summary_table(f"{streams} stream{'s' if streams > 1 else ''}", summary.to_dict()))
    out.print(f"stored run [bold]{result.run_id}[/] in {store_path}  (servelab runs show {result.run_id})")
    if any(s.ok == 0 for s in result.levels.values()):
        raise typer.Exit(1)
