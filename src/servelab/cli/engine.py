"""`servelab engine up|down|status`: the embedded vLLM engine."""

from __future__ import annotations

import math

import typer
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

from servelab.cli._common import JsonOption, console, finite, print_json
from servelab.core.errors import UsageError
from servelab.engines.embedded import EmbeddedEngine, EngineSettings, EngineState
from servelab.engines.llamacpp import LlamaServerEngine, llamacpp_settings

app = typer.Typer(
    help="The embedded engines: real vLLM (CPU) or llama.cpp's llama-server, serving SmolLM2-135M-Instruct on "
    "loopback.",
    no_args_is_help=True,
)

PortOption = typer.Option(
    None, "--port", help="Port on 127.0.0.1 (vllm: 8765 or $SERVELAB_ENGINE_PORT; llamacpp: 8766 or "
    "$SERVELAB_LLAMACPP_PORT)."
)  # fmt: skip
ENGINES = ("vllm", "llamacpp")
EngineOption = typer.Option("vllm", "--engine", help="vllm (the CPU build) or llamacpp (llama-server, built once).")


def _engine(port: int | None, kind: str = "vllm") -> EmbeddedEngine:
    if kind == "llamacpp":
        return LlamaServerEngine(llamacpp_settings() if port is None else llamacpp_settings(port=port))
    if kind != "vllm":
        raise UsageError(f"unknown engine {kind!r}", hint="vllm or llamacpp")
    settings = EngineSettings() if port is None else EngineSettings(port=port)
    return EmbeddedEngine(settings)


PROGRESS_LINE_S = 15.0  # without a terminal (a pipe, a log) a line of progress this often instead of a spinner


def start_with_progress(engine: EmbeddedEngine) -> EngineState:
    """Start (or reuse) the engine behind a spinner showing the phase, the engine's last log line and the elapsed
    time; once it is starting, one line says what and where its log is, and without a terminal a line every
    PROGRESS_LINE_S seconds says the same, so a long start is never silent."""
    out = console()
    said = {"start": False, "at": -math.inf}  # without a terminal the first line comes at once

    def report(bar: Progress, task: TaskID, phase: str, elapsed: float) -> None:
        if not said["start"]:
            said["start"] = True
            bar.console.print(f"starting the embedded {engine.label} on {engine.settings.url} (it can take a minute "
                              f"or more); log: {engine.settings.log_path}")  # fmt: skip
        bar.update(task, description=phase)
        if not out.is_terminal and elapsed - said["at"] >= PROGRESS_LINE_S:
            said["at"] = elapsed
            bar.console.print(f"  {elapsed:.0f} s: {phase}")

    with Progress(SpinnerColumn(), TextColumn("{task.description}", markup=False), TimeElapsedColumn(), console=out,
                  transient=True) as bar:  # fmt: skip
        task = bar.add_task("embedded engine", total=None)
        return engine.up(progress=lambda phase, elapsed: report(bar, task, phase, elapsed))


@app.command()
def up(
    port: int | None = PortOption,
    kind: str = EngineOption,
    timeout: float = typer.Option(600.0, "--timeout", min=1.0, help="Seconds to wait for /health."),
    json_out: bool = JsonOption,
) -> None:
    """Start the engine (or reuse the running one) and wait until /health answers."""
    finite(timeout=timeout)
    engine = _engine(port, kind)
    if timeout != 600.0:
        from dataclasses import replace

        engine.settings = replace(engine.settings, start_timeout_s=timeout)
    state = start_with_progress(engine)
    if json_out:
        print_json(_state_dict(state))
        return
    verb = "reused" if state.reused else "started"
    console().print(f"engine {verb}: {state.url}  model {state.model}  pid {state.pid}\nlog: {state.log}")


@app.command()
def down(port: int | None = PortOption, kind: str = EngineOption) -> None:
    """Stop the engine cleanly (SIGTERM, then SIGKILL after 15 s). The log is kept."""
    engine = _engine(port, kind)
    stopped = engine.down()
    console().print("engine stopped" if stopped else "no engine was running")
    console().print(f"log: {engine.settings.log_path}")


@app.command()
def status(
    port: int | None = PortOption,
    kind: str | None = typer.Option(None, "--engine", help="vllm or llamacpp (default: both)."),
    json_out: bool = JsonOption,
) -> None:
    """Say whether each embedded engine (vLLM and llama.cpp's llama-server) runs, where, and where its log is.
    Exit 1 when none of those asked about runs."""
    kind = kind or ("vllm" if port is not None else None)  # a port names one engine's
    kinds = [kind] if kind else list(ENGINES)
    states = {k: _engine(port, k).status() for k in kinds}
    if json_out:
        shown = {k: _state_dict(s) if s else {"running": False} for k, s in states.items()}
        print_json(shown[kinds[0]] if kind else shown)
    else:
        for k, state in states.items():
            head = f"{k}: " if not kind else ""
            if state is None:
                console().print(f"{head}not running (log: {_engine(port, k).settings.log_path})")
            else:
                console().print(f"{head}running: {state.url}  model {state.model}  pid {state.pid}\n  log: {state.log}")
    if not any(states.values()):
        raise typer.Exit(1)


def _state_dict(state: EngineState) -> dict[str, object]:
    return {"running": True, **{k: getattr(state, k) for k in state.__dataclass_fields__}}
