"""`servelab engine up|down|status`: the embedded vLLM engine."""

from __future__ import annotations

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

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
EngineOption = typer.Option("vllm", "--engine", help="vllm (the CPU build) or llamacpp (llama-server, built once).")


def _engine(port: int | None, kind: str = "vllm") -> EmbeddedEngine:
    if kind == "llamacpp":
        return LlamaServerEngine(llamacpp_settings() if port is None else llamacpp_settings(port=port))
    if kind != "vllm":
        raise UsageError(f"unknown engine {kind!r}", hint="vllm or llamacpp")
    settings = EngineSettings() if port is None else EngineSettings(port=port)
    return EmbeddedEngine(settings)


def start_with_progress(engine: EmbeddedEngine) -> EngineState:
    """Start (or reuse) the engine behind a spinner showing the phase and elapsed time."""
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}", markup=False),
        TimeElapsedColumn(),
        console=console(),
        transient=True,
    ) as bar:
        task = bar.add_task("embedded engine", total=None)
        return engine.up(progress=lambda phase, _elapsed: bar.update(task, description=phase))


@app.command()
def up(
    port: int | None = PortOption,
    kind: str = EngineOption,
    timeout: float = typer.Option(600.0, "--timeout", help="Seconds to wait for /health."),
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
def status(port: int | None = PortOption, kind: str = EngineOption, json_out: bool = JsonOption) -> None:
    """Say whether the engine runs, where, and where its log is. Exit 1 when it does not run."""
    engine = _engine(port, kind)
    state = engine.status()
    if json_out:
        print_json(_state_dict(state) if state else {"running": False})
    elif state is None:
        console().print(f"not running (log: {engine.settings.log_path})")
    else:
        console().print(f"running: {state.url}  model {state.model}  pid {state.pid}\nlog: {state.log}")
    if state is None:
        raise typer.Exit(1)


def _state_dict(state: EngineState) -> dict[str, object]:
    return {"running": True, **{k: getattr(state, k) for k in state.__dataclass_fields__}}
