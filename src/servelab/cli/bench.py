"""`servelab bench` and `servelab compare`: targets side by side on the seed workloads."""

from __future__ import annotations

import csv
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import typer

from servelab.bench import (
    DEFAULT_REQUESTS,
    HOLD_WAVES,
    SLO,
    Load,
    Row,
    Scenario,
    Step,
    Target,
    at_levels,
    at_rates,
    check_turns,
    compare_runs,
    expand,
    parse_slo,
    rows_to_dicts,
    run_bench,
    scenario_names,
    search_slo,
    sized,
    trace_scenario,
    with_session_options,
)
from servelab.cli._common import (
    ApiKeyOption,
    JsonOption,
    ModelOption,
    StoreOption,
    console,
    finite,
    open_store,
    print_json,
    refuse_failed,
    show_run,
    targets_from,
)
from servelab.cli.progress import steps
from servelab.core.errors import UsageError
from servelab.core.stats import Interval
from servelab.core.store import RunStore
from servelab.core.terminal import line
from servelab.load.cluster import connect as connect_ray
from servelab.report import compare_table, rich_table


def bench(
    target: list[str] = typer.Option(
        [], "--target", help="NAME=URL of an OpenAI-compatible server; repeat (default: $OPENAI_BASE_URL)."
    ),
    model: list[str] = ModelOption,
    api_key: list[str] = ApiKeyOption,
    scenario: list[str] = typer.Option(
        ["seed-000"],
        "--scenario",
        help=f"seed-000 (= code-chat, character-chat, studio-enhance, concurrent-4), "
        f"one of {', '.join(scenario_names())}, synthetic:IN:OUT (tokens, or LOW-HIGH ranges), or your traffic: "
        "a .jsonl of prompts or OpenAI messages, or a ShareGPT file; repeat.",
    ),
    requests: int | None = typer.Option(
        None,
        "--requests",
        min=1,
        help="Measured requests per scenario and target (default: 5, and 4 per stream of a concurrent step).",
    ),
    trace: Path | None = typer.Option(
        None,
        "--trace",
        help="Replay a Mooncake-format trace (JSONL: timestamp ms, input_length, output_length, hash_ids) at its "
        "own times, requests sharing a hash id sharing that prefix block.",
    ),
    trace_speed: float = typer.Option(1.0, "--trace-speed", min=0.001, help="Replay the trace this many times faster."),
    sessions: int | None = typer.Option(
        None, "--sessions", min=1, help="A session scenario's concurrent sessions (with --rate: sessions sent)."
    ),
    turns: int | None = typer.Option(None, "--turns", min=1, help="Turns per session (a session scenario)."),
    think_time: str | None = typer.Option(
        None, "--think-time", help="Seconds between an answer and the session's next turn: S, LOW-HIGH or exp:MEAN."
    ),
    ramp: float | None = typer.Option(
        None, "--ramp", min=0.0, max=86_400.0, help="Seconds over which concurrent sessions' first turns are spread."
    ),
    concurrency: int | None = typer.Option(None, "--concurrency", min=1, help="Override the scenario's streams."),
    rate: float | None = typer.Option(None, "--rate", min=0.001, help="Open loop: requests per second."),
    arrival: str = typer.Option("poisson", "--arrival", help="poisson or constant (with --rate)."),
    warmup: int = typer.Option(1, "--warmup", min=0, max=100_000, help="Unrecorded requests before each step."),
    max_tokens: int | None = typer.Option(None, "--max-tokens", min=1, help="Override output tokens."),
    prefix_tokens: int | None = typer.Option(
        None, "--prefix-tokens", min=0, help="Override a long-prefix scenario's length."
    ),
    duration: float | None = typer.Option(None, "--duration", help="Stop scheduling after this many seconds."),
    order: str = typer.Option("interleaved", "--order", help="interleaved (scenario by scenario) or sequential."),
    unique: bool = typer.Option(
        True,
        "--unique-prefix/--no-unique-prefix",
        help="Head each request with a unique line (default), or send byte-identical "
        "requests to match another tool's workload.",
    ),
    bad_lines: str = typer.Option(
        "stop", "--bad-lines", help="A dataset line that is not a request: stop (say which) or skip it."
    ),
    fixed_output: str = typer.Option(
        "ignore_eos",
        "--fixed-output",
        help="How output lengths are fixed: ignore_eos (as vllm bench serve), min_tokens (also min_tokens = "
        "max_tokens, for engines that ignore ignore_eos) or off.",
    ),
    temperature: float = typer.Option(
        0.0,
        "--temperature",
        min=0.0,
        max=2.0,
        help="Sampling temperature of every request (0: greedy). With random (dummy) weights, 1.0 lets an MoE "
        "route as real text would.",
    ),
    sweep: str | None = typer.Option(None, "--sweep", help="Run each scenario at these concurrencies, like 1,2,4,8."),
    rate_sweep: str | None = typer.Option(
        None, "--rate-sweep", help="Run each scenario open loop at these request rates (req/s), like 0.5,1,2."
    ),
    slo: str | None = typer.Option(
        None,
        "--slo",
        help="Find the highest concurrency (or rate, --slo-over rate) that meets an SLO, like ttft=300ms,itl=50ms "
        "(errors count as failures).",
    ),
    slo_over: str = typer.Option(
        "concurrency", "--slo-over", help="What the SLO search raises: concurrency, rate or sessions."
    ),
    slo_attainment: float = typer.Option(
        0.9, "--slo-attainment", min=0.01, max=1.0, help="Share of requests that must meet the SLO."
    ),
    slo_turns: str = typer.Option(
        "all",
        "--slo-turns",
        help="Session scenarios: the turns the SLO judges, all or warm (past each session's first, cold, turn).",
    ),
    max_concurrency: int = typer.Option(64, "--max-concurrency", min=1, help="Upper bound of the SLO search."),
    max_rate: float = typer.Option(64.0, "--max-rate", min=0.001, help="Upper bound of an SLO search over rate."),
    start_rate: float = typer.Option(0.5, "--start-rate", min=0.001, help="First rate of an SLO search over rate."),
    workers: int | None = typer.Option(
        None,
        "--workers",
        min=1,
        max=4096,
        help="Load-generating processes, each with its own event loop (default: one per 32 streams or 32 req/s, "
        "up to half the cores).",
    ),
    ray: str | None = typer.Option(
        None,
        "--ray",
        help="The load from Ray actors spread over a cluster's nodes: auto (the cluster this host is in) or HEAD:PORT "
        "(pip install 'servelab[ray]'; --workers: how many actors, default one per node or per 32 streams).",
    ),
    confirm: bool = typer.Option(
        False,
        "--confirm",
        help="When a step's verdict names the load generator, run the step again with twice the load processes and "
        "let what that changed decide (the rate up 10% or more: confirmed; else the server side is named).",
    ),
    goodput: str | None = typer.Option(
        None, "--goodput", help="Count each step's requests within this SLO per second, like ttft=300ms,itl=50ms."
    ),
    csv_out: Path | None = typer.Option(None, "--csv", help="Also write the side-by-side table as CSV."),
    store: Path | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Speed on the seed workloads, every target side by side, with intervals and a mark where they differ."""
    finite(
        trace_speed=trace_speed,
        rate=rate,
        duration=duration,
        slo_attainment=slo_attainment,
        max_rate=max_rate,
        start_rate=start_rate,
    )
    if duration is not None and duration <= 0:
        raise UsageError(f"--duration wants seconds above 0, got {duration}")
    if arrival not in ("poisson", "constant") or order not in ("interleaved", "sequential"):
        raise UsageError("--arrival is poisson or constant; --order is interleaved or sequential")
    if slo_over not in ("concurrency", "rate", "sessions"):
        raise UsageError(f"--slo-over is concurrency, rate or sessions, got {slo_over!r}")
    if fixed_output not in ("ignore_eos", "min_tokens", "off"):
        raise UsageError(f"--fixed-output is ignore_eos, min_tokens or off, got {fixed_output!r}")
    if sweep and rate_sweep:
        raise UsageError("choose --sweep (concurrency) or --rate-sweep, not both")
    if confirm and slo:
        raise UsageError("--confirm tests the verdicts of bench steps; an --slo search does not take it")
    if bad_lines not in ("stop", "skip"):
        raise UsageError(f"--bad-lines is stop or skip, got {bad_lines!r}")
    levels, rates = parse_levels(sweep) if sweep else None, parse_rates(rate_sweep) if rate_sweep else None
    good = parse_slo(goodput) if goodput else None
    if slo:
        parse_slo(slo, slo_attainment)  # refused here, before any server is asked
    scenarios = expand(scenario, "skip" if bad_lines == "skip" else "stop")  # refused before any server is asked
    if trace is not None:  # the trace alone, unless scenarios were named beside it
        scenarios = [*([] if scenario == ["seed-000"] else scenarios), trace_scenario(trace, trace_speed)]
    scenarios = with_session_options(scenarios, sessions=sessions, turns=turns, think_time=think_time, ramp=ramp)
    if slo_over == "sessions" and not all(s.sessions for s in scenarios):
        raise UsageError("--slo-over sessions searches session scenarios only", hint="--scenario agentic-coding")
    _check_slo_turns(slo_turns, scenarios)
    if ray:
        connect_ray(ray)  # Ray missing or no cluster there: said before any server is asked
    targets = targets_from(target, model, api_key, quiet=json_out, needed_by="bench")
    load = Load(
        requests=requests or DEFAULT_REQUESTS,
        per_stream=0 if requests else HOLD_WAVES,  # an asked count stays as asked
        concurrency=concurrency,
        rate=rate,
        arrival=arrival,  # type: ignore[arg-type]
        warmup=warmup,
        max_tokens=max_tokens,
        prefix_tokens=prefix_tokens,
        duration_s=duration,
        unique_prefix=unique,
        fixed_output=fixed_output,  # type: ignore[arg-type]
        temperature=temperature,
        workers=workers,
        ray=ray,
    )
    bar = steps(not json_out)
    if levels:
        scenarios = at_levels(scenarios, levels)
    if rates:
        scenarios = at_rates(scenarios, rates)
    run_args: dict[str, object] = {
        "targets": target,
        "scenarios": scenario,
        "requests": requests,
        "sweep": sweep,
        "rate_sweep": rate_sweep,
        "slo": slo,
        "slo_over": slo_over,
        "slo_turns": slo_turns,
        "sessions": sessions,
        "turns": turns,
        "think_time": think_time,
        "ramp": ramp,
        "temperature": temperature,
        "trace": None if trace is None else str(trace),
        "trace_speed": trace_speed,
        "workers": workers,
        "ray": ray,
        "goodput": goodput,
        "confirm": confirm,
    }
    with open_store(store) as db, bar as progress:
        by_name = {s.name: s for s in scenarios}

        def step(target_name: str, scenario_name: str) -> None:
            known = by_name.get(scenario_name)
            total = sized(load, known).requests if known else load.requests
            progress.start(f"{scenario_name} on {target_name}", None if slo else total)

        if slo:
            bounds = SearchBounds(slo_over, max_rate if slo_over == "rate" else max_concurrency, start_rate)
            judged = parse_slo(slo, slo_attainment, slo_turns)
            _search(db, targets, scenarios, load, judged, bounds, step, run_args, json_out)
            return
        result = run_bench(
            db,
            targets,
            scenarios,
            load,
            order=order,
            on_step=step,
            on_record=progress.record,
            args=run_args,
            goodput=good,
            confirm=confirm,
        )
    if csv_out:
        write_csv(result.rows, csv_out)
    if json_out:
        print_json(
            {
                "run_id": result.run_id,
                "rows": rows_to_dicts(result.rows),
                "steps": [s.model_dump(mode="json") for s in result.stored.steps],
                "bottlenecks": bottlenecks(result.stored.steps),
                "metrics": result.metrics,
                "failed": result.stored.failed_steps(),
                "warnings": result.warnings,
            }
        )
    else:
        with open_store(store) as db:
            show_run(db, result.run_id)
    refuse_failed(result.stored)


def bottlenecks(steps: list[Step]) -> dict[str, str]:
    """``target/step`` -> what limited it."""
    return {f"{s.target}/{s.scenario}": s.bottleneck.limit for s in steps if s.bottleneck}


def _check_slo_turns(turns: str, scenarios: list[Scenario]) -> None:
    """``warm`` judges a session's later turns: refused where a scenario has no sessions (it would judge nothing
    differently, and say it had)."""
    if check_turns(turns) == "warm" and not all(s.sessions for s in scenarios):
        raise UsageError("--slo-turns warm judges session scenarios only", hint="--scenario agentic-coding")


def parse_levels(text: str) -> list[int]:
    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--sweep wants concurrencies like 1,2,4,8, got {text!r}") from None
    if not levels or min(levels) < 1:
        raise UsageError(f"--sweep wants concurrencies of at least 1, got {text!r}")
    return levels


def parse_rates(text: str) -> list[float]:
    try:
        rates = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--rate-sweep wants request rates like 0.5,1,2, got {text!r}") from None
    if not rates or not all(0 < r < math.inf for r in rates):
        raise UsageError(f"--rate-sweep wants finite rates above 0, got {text!r}")
    return rates


@dataclass(frozen=True)
class SearchBounds:
    over: str
    limit: float
    start_rate: float


def _search(
    db: RunStore,
    targets: list[Target],
    scenarios: list[Scenario],
    load: Load,
    slo: SLO,
    bounds: SearchBounds,
    step: Callable[[str, str], None],
    run_args: dict[str, object],
    json_out: bool,
) -> None:
    for scenario in scenarios:
        result, found = search_slo(
            db,
            targets,
            scenario,
            load,
            slo,
            limit=bounds.limit,
            over=bounds.over,
            start_rate=bounds.start_rate,
            on_step=step,
            args=run_args,
        )
        if json_out:
            print_json(
                {
                    "run_id": result.run_id,
                    "scenario": scenario.name,
                    "over": bounds.over,
                    "targets": {t: {"best": s.best, "tried": s.tried} for t, s in found.items()},
                }
            )
            continue
        show_run(db, result.run_id)


def compare(
    run_a: str = typer.Argument(..., help="A bench run (id, prefix or 'latest')."),
    run_b: str = typer.Argument(..., help="Another bench run."),
    store: Path | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Two stored bench runs of one kind side by side (targets renamed RUN:TARGET), with the ratio and the difference,
    and what differed between them (settings, a server busy with other clients)."""
    with open_store(store) as db:
        got = compare_runs(db, run_a, run_b)
    if json_out:
        print_json(
            {"first": got.first, "second": got.second, "rows": rows_to_dicts(got.rows), "warnings": got.warnings}
        )
        return
    out = console()
    out.print(rich_table(compare_table(got.rows, f"{got.first} vs {got.second}")))
    for warning in got.warnings:
        out.print(line(("warning:", "yellow"), f" {warning}"))


def write_csv(rows: list[Row], path: Path) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            [
                "scenario",
                "target",
                "n",
                "ok",
                "tok_s_median",
                "tok_s_low",
                "tok_s_high",
                "ttft_ms_median",
                "ttft_ms_low",
                "ttft_ms_high",
                "aggregate_tok_s",
                "cached_tokens",
            ]
        )
        for row in rows:
            for target, c in row.cells.items():
                writer.writerow(
                    [
                        row.scenario,
                        target,
                        c.n,
                        c.ok,
                        *_triple(c.tok_s),
                        *_triple(c.ttft_ms),
                        round(c.aggregate_tok_s, 3),
                        "" if c.cached_tokens is None else c.cached_tokens,
                    ]
                )
    print(f"wrote {path}", file=sys.stderr)


def _triple(iv: Interval | None) -> list[object]:
    return ["", "", ""] if iv is None else [round(iv.estimate, 3), round(iv.low, 3), round(iv.high, 3)]
