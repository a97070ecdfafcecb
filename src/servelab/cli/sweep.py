"""`servelab sweep`: start the engine for each configuration of a grid, measure it, and set the plan beside it."""

from __future__ import annotations

from pathlib import Path

import typer

from servelab.bench import SLO
from servelab.cli._common import JsonOption, StoreOption, console, open_store, print_json, result_json, show_run
from servelab.core.errors import UsageError
from servelab.core.terminal import styled
from servelab.plan import parse_alongside, parse_size
from servelab.sweep import (
    ENGINES,
    SweepOptions,
    SweepSpec,
    Where,
    Workload,
    make_grid,
    read_spec,
    run_sweep,
    stored_options,
)


def _ints(text: str, flag: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise UsageError(f"{flag} {text!r}: whole numbers separated by commas", hint="like 1,4") from None
    if not values or any(v < 1 for v in values):
        raise UsageError(f"{flag} {text!r}: each value at least 1", hint="like 1,4")
    return values


def sweep(
    engine: str | None = typer.Option(
        None, "--engine", help=f"The engine to start: {', '.join(ENGINES)} (default vllm)."
    ),
    model: str | None = typer.Option(
        None, "--model", help="A model folder (vLLM, SGLang) or GGUF file (llama.cpp); none: the embedded engine's."
    ),
    model_config: str | None = typer.Option(
        None,
        "--model-config",
        help="What the plan reads when --model is no folder with a config.json: a preset or folder.",
    ),
    grid: list[str] = typer.Option(
        [],
        "--grid",
        help='An axis: "--flag v1,v2", "--switch" (off, on) or "ENV=v1,v2"; "-" leaves a flag out; repeat.',
    ),
    point: list[str] = typer.Option(
        [], "--point", help='A configuration given whole: "ENV=V --flag value ..."; repeat.'
    ),
    spec: Path | None = typer.Option(None, "--spec", help="A TOML or JSON file with the sweep's settings."),
    scenario: list[str] = typer.Option(
        [], "--scenario", help="Bench scenario for each point (default code-chat); repeat."
    ),
    concurrency: str | None = typer.Option(None, "--concurrency", help="Concurrency levels, like 1,4 (default 1)."),
    sessions: str | None = typer.Option(
        None, "--sessions", help="A session scenario's levels, concurrent sessions like 1,2,4 (default: --concurrency)."
    ),
    requests: int | None = typer.Option(None, "--requests", min=1, help="Requests per step (default 8)."),
    max_tokens: int | None = typer.Option(
        None, "--max-tokens", min=1, help="Output tokens per request (default 64; a session spec's own replies)."
    ),
    temperature: float | None = typer.Option(
        None, "--temperature", min=0.0, max=2.0, help="Every request's sampling temperature (default 0: greedy)."
    ),
    eval_suite: list[str] = typer.Option(
        [], "--eval", help="An eval suite asked at each point after its bench (not code, repo or replay); repeat."
    ),
    slo: str | None = typer.Option(None, "--slo", help="Like ttft=300ms,itl=50ms: names the best point that keeps it."),
    attainment: float = typer.Option(0.9, "--slo-attainment", min=0.01, max=1.0, help="Share of requests within it."),
    slo_turns: str | None = typer.Option(
        None, "--slo-turns", help="Session scenarios: the turns the SLO judges, all (default) or warm (past the first)."
    ),
    gpu_key: str | None = typer.Option(
        None, "--gpu", help="Plan for this GPU (default: this host's memory, CPU build)."
    ),
    alongside: list[str] = typer.Option([], "--alongside", help="A co-tenant's peak memory, NAME=SIZE; repeat."),
    headroom: str = typer.Option("0GiB", "--headroom", help="Memory to leave free besides the co-tenants."),
    try_all: bool = typer.Option(False, "--try-all", help="Start the points the plan says will not fit, too."),
    port: int | None = typer.Option(None, "--port", min=1, max=65535, help="The engines' port (default: a free one)."),
    start_timeout: float | None = typer.Option(
        None, "--start-timeout", min=1, help="Seconds to /health (default 600)."
    ),
    resume: str | None = typer.Option(None, "--resume", help="A stored sweep run: start only the points it lacks."),
    store: Path | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Start the engine once per configuration, read what it allocated, measure it and stop it; one stored run."""
    say = (lambda _: None) if json_out else (lambda text: console().print(styled(text, "dim")))
    with open_store(store) as db:
        if resume is not None:
            if grid or point or spec or engine or model:
                raise UsageError("--resume goes on with the stored run's own settings",
                                 hint="give --resume RUN alone (with --store, --port or --json)")  # fmt: skip
            options = stored_options(db, resume)
            if port is not None:
                options = _with_port(options, port)
        else:
            options = _options(engine, model, model_config, grid, point, spec, scenario, concurrency, sessions,
                               requests, max_tokens, temperature, eval_suite, slo, attainment, slo_turns, gpu_key,
                               alongside, headroom, try_all, port, start_timeout)  # fmt: skip
        run_id, result = run_sweep(
            db, options, say, resume=db.get_run(resume, kinds=("sweep",)).run_id if resume else None
        )
        if json_out:
            print_json({"run_id": run_id, **result_json(result)})
        else:
            show_run(db, run_id)
    if not any(p.status == "measured" for p in result.points):
        raise typer.Exit(1)


def _first(*values: float | None) -> float:
    """The first value given (an asked 0 included)."""
    return next(v for v in values if v is not None)


def _with_port(options: SweepOptions, port: int) -> SweepOptions:
    from dataclasses import replace

    return replace(options, port=port)


def _options(engine: str | None, model: str | None, model_config: str | None, grid: list[str], point: list[str],
             spec_path: Path | None, scenario: list[str], concurrency: str | None, sessions: str | None,
             requests: int | None,
             max_tokens: int | None, temperature: float | None, evals: list[str], slo: str | None, attainment: float,
             slo_turns: str | None,
             gpu_key: str | None, alongside: list[str], headroom: str, try_all: bool, port: int | None,
             start_timeout: float | None) -> SweepOptions:  # fmt: skip
    from servelab.plan import gpu
    from servelab.sweep import Grid

    spec = read_spec(spec_path) if spec_path else None
    made = make_grid(grid, point)
    if spec is not None:
        from_spec = spec.to_grid()
        made = Grid(from_spec.axes + made.axes, from_spec.points + made.points)
    if not made.axes and not made.points:
        raise UsageError("a sweep needs at least one --grid axis or --point", hint='like --grid "-np 1,2"')
    scenarios = tuple(s for text in scenario for s in text.split(",") if s) or tuple(
        (spec.scenarios if spec else None) or ()
    )
    levels = _ints(concurrency, "--concurrency") if concurrency else tuple((spec.concurrency if spec else None) or (1,))
    slo_text = slo or (spec.slo if spec else None)
    gpu_name = gpu_key or (spec.gpu if spec else None)
    if gpu_name:
        gpu(gpu_name)  # a typo said at once
    work = Workload(scenarios or ("code-chat",), levels, requests or (spec.requests if spec else None) or 8,
                    max_tokens or (spec.max_tokens if spec else None),
                    _evals(evals or (spec.evals if spec else [])), _session_levels(sessions, spec),
                    _first(temperature, spec.temperature if spec else None, 0.0))  # fmt: skip
    return SweepOptions(
        engine=engine or (spec.engine if spec else None) or "vllm",
        grid=made,
        model=model or (spec.model if spec else None),
        model_config=model_config or (spec.config if spec else None),
        work=work,
        slo=_slo(slo_text, attainment, slo_turns or (spec.slo_turns if spec else None) or "all"),
        where=Where(gpu_name, parse_alongside([*alongside, *(spec.alongside if spec else [])]), parse_size(headroom)),
        try_all=try_all or bool(spec and spec.try_all),
        port=port,
        start_timeout_s=start_timeout or (spec.start_timeout if spec else None) or 600.0,
    )


def _slo(text: str | None, attainment: float, turns: str) -> SLO | None:
    """The sweep's SLO; ``turns`` (all or warm) says which turns of a session step it judges."""
    from servelab.bench import check_turns, parse_slo

    if text is None:
        if check_turns(turns) == "warm":
            raise UsageError("--slo-turns goes with an SLO", hint="--slo ttft=3s --slo-turns warm")
        return None
    return parse_slo(text, attainment, turns)


def _evals(names: list[str]) -> tuple[str, ...]:
    """The eval suites a point is asked: the built-in suites but code, and needle; code, repo and replay need a
    sandbox, tasks or traces that a sweep does not carry."""
    from servelab.eval import builtin_suites

    known = [*(s for s in builtin_suites() if s != "code"), "needle"]
    for name in names:
        if name in ("code", "repo", "replay"):
            raise UsageError(f"--eval {name!r} needs a sandbox, tasks or traces: run it with servelab eval",
                             hint=", ".join(known))  # fmt: skip
        if name not in known:
            raise UsageError(f"--eval {name!r}: no such suite", hint=", ".join(known))
    return tuple(dict.fromkeys(names))


def _session_levels(text: str | None, spec: SweepSpec | None) -> tuple[int, ...] | None:
    if text:
        return _ints(text, "--sessions")
    return tuple(spec.sessions) if spec and spec.sessions else None
