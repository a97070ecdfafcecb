"""`servelab check`: plan, bench, eval and coexist on one target (the embedded engine when none is given), then
one HTML report. A failed step is reported and the others still run."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import typer

from servelab.check import (
    STEPS,
    CheckOptions,
    CheckOutcome,
    default_report_path,
    failure_notes,
    report_runs,
    run_check,
    validate,
)
from servelab.cli._common import (
    ApiKeyOption,
    JsonOption,
    ModelOption,
    StoreOption,
    console,
    open_store,
    print_json,
)
from servelab.cli.engine import start_with_progress
from servelab.core.terminal import line, styled
from servelab.engines.embedded import EmbeddedEngine
from servelab.load import resolve_all, target_specs
from servelab.report import build_report, print_summary, write_report


def check(
    target: list[str] = typer.Option(
        [],
        "--target",
        help="NAME=URL of an OpenAI-compatible server; repeat. None: $OPENAI_BASE_URL, else the embedded engine.",
    ),
    model: list[str] = ModelOption,
    api_key: list[str] = ApiKeyOption,
    model_config: str | None = typer.Option(
        None, "--model-config", help="For the plan step: a preset name or a folder with config.json."
    ),
    gpu: str | None = typer.Option(
        None, "--gpu", help="The GPU the plan step sizes for (default: this machine's; none: no plan step)."
    ),
    context: str | None = typer.Option(
        None, "--context", help="The plan step's context per session (default: 32k, or the model's maximum if shorter)."
    ),
    alongside: list[str] = typer.Option([], "--alongside", help="A co-tenant's peak memory, NAME=SIZE; repeat."),
    suite: str = typer.Option("quick", "--suite", help="Eval suites: quick or full."),
    skip: list[str] = typer.Option([], "--skip", help=f"Skip a step: {', '.join(STEPS)}; repeat."),
    max_tokens: int = typer.Option(64, "--max-tokens", min=1, help="Output tokens per bench request."),
    out: Path | None = typer.Option(None, "--out", help="Where to write the report (default beside the store)."),
    keep_engine: bool = typer.Option(False, "--keep-engine", help="Leave the embedded engine running."),
    store: Path | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """The whole answer in one command: plan, bench, eval, coexist, then a report."""
    console_out = console()
    engine: EmbeddedEngine | None = None
    started_here = False
    options = CheckOptions(
        model_config=model_config,
        gpu=gpu,
        context=context,
        alongside=alongside,
        suite=suite,
        skip=frozenset(skip),
        max_tokens=max_tokens,
    )
    validate(options)  # every argument, before an engine starts or a step runs
    specs = target_specs(target, model, api_key)
    if not specs:
        engine = EmbeddedEngine()
        state = start_with_progress(engine)
        started_here = not state.reused
        specs = target_specs([f"embedded={state.url}"], model, api_key)
        settings = engine.settings
        options = replace(options, model_config=model_config or str(settings.model_dir),
                          engine_memory=(settings.kv_cache_gib * 2**30, settings.max_model_len))  # fmt: skip
        console_out.print(f"embedded engine {'reused' if state.reused else 'started'} at {state.url}")

    def progress(step: str, what: str) -> None:
        if not json_out:
            console_out.print(line((step, "bold"), f": {what}"))

    try:
        with open_store(store) as db:
            results = run_check(db, resolve_all(specs), options, progress)
            path = out or default_report_path(db.path)
            report = write_report(db, report_runs(results), path, notes=failure_notes(results))
    finally:
        if engine is not None and started_here and not keep_engine:
            engine.down()
    _finish(db.path, results, report, json_out)


def _finish(db_path: Path, outcome: CheckOutcome, report: Path, json_out: bool) -> None:
    if json_out:
        steps = [r.__dict__ for r in outcome]
        print_json({"run_id": outcome.run_id, "steps": steps, "report": str(report)})
    else:
        with open_store(db_path) as db:
            print_summary(console(), build_report(db, report_runs(outcome), failure_notes(outcome), with_plots=False))
        console().print(styled("each verdict's evidence, every table and the plots are in the report", "dim"))
        console().print(f"report: {report.resolve()}")
    if any(r.error for r in outcome):
        raise typer.Exit(1)
