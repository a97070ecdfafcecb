"""`servelab eval`: capability by axis, every target side by side, strict and semantic apart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from servelab.bench import resolve_targets
from servelab.cli._common import JsonOption, StoreOption, console, open_store, parse_target, print_json
from servelab.core.errors import UsageError
from servelab.eval import (
    AgentLimits,
    EvalOptions,
    EvalResult,
    RepoResult,
    builtin_suites,
    builtin_tasks,
    load_items,
    load_task,
    regrade,
    run_eval,
    run_repo,
    sandbox_kind,
)

CODE_SUITES = ("code", "repo")
FULL = ("quick", "strict", "tools", "code", "needle", "repo")


def eval_command(
    target: list[str] = typer.Option([], "--target", help="NAME=URL of an OpenAI-compatible server; repeat."),
    suite: list[str] = typer.Option(
        ["quick"],
        "--suite",
        help=f"One of {', '.join([*builtin_suites(), 'needle', 'repo', 'replay'])}, or full; repeat.",
    ),
    task: list[str] = typer.Option(
        [], "--task", help=f"Repo-repair task for --suite repo: {', '.join(builtin_tasks())} or a folder; repeat."
    ),
    traces: Path | None = typer.Option(
        None, "--traces", help="Agent traces (JSONL of message lists) for --suite replay."
    ),
    max_steps: int = typer.Option(30, "--max-steps", min=1, help="Agent steps per repo-repair attempt."),
    agent_timeout: float = typer.Option(600.0, "--agent-timeout", min=1.0, help="Seconds per repo-repair attempt."),
    repeats: int = typer.Option(1, "--repeats", min=1, help="Ask every item K times (pass@k, pass^k, flip rate)."),
    concurrency: int = typer.Option(4, "--concurrency", min=1, help="Requests in flight per target."),
    temperature: float = typer.Option(0.0, "--temperature", min=0.0, help="Sampling temperature."),
    timeout: float = typer.Option(120.0, "--timeout", min=1.0, help="Longest silence allowed in a reply (s)."),
    needle_lengths: str = typer.Option("2000,8000,36000", "--needle-lengths", help="Needle prompt sizes, tokens."),
    unsafe: bool = typer.Option(False, "--unsafe", help="Run model-written code without bubblewrap."),
    regrade_run: str | None = typer.Option(None, "--regrade", help="Grade a stored eval run again, offline."),
    store: Path | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Capability by axis: one outcome per item (correct, format_violation, wrong, error, timeout)."""
    suites = _suites(suite)
    lengths = _lengths(needle_lengths)
    needs_sandbox = bool(set(suites) & set(CODE_SUITES))
    with open_store(store) as db:
        if regrade_run:
            result = regrade(db, regrade_run, _regrade_options(needs_sandbox, unsafe))
        else:
            if not target:
                raise UsageError("eval needs at least one --target NAME=URL (or --regrade RUN)")
            options = EvalOptions(
                repeats=repeats,
                concurrency=concurrency,
                temperature=temperature,
                read_timeout=timeout,
                sandbox=sandbox_kind(unsafe) if needs_sandbox else None,
            )
            tasks = [load_task(t) for t in (task or builtin_tasks())] if "repo" in suites else []
            items = load_items([s for s in suites if s != "repo"], lengths, traces)
            targets = resolve_targets([parse_target(t) for t in target])
            args = {"targets": target, "suites": suites, "repeats": repeats}
            limits = AgentLimits(max_steps=max_steps, timeout_s=agent_timeout)
            repo = [
                run_repo(db, targets, t, options.sandbox or "bwrap", repeats=repeats, limits=limits, args=args)
                for t in tasks
            ]
            if not items:
                _show_repo(repo, json_out)
                return
            result = run_eval(db, targets, items, options, args=args)
            if not json_out:
                _show_repo(repo, json_out)
            else:
                repo_json = [{"run_id": r.run_id, **r.summary} for r in repo]
                print_json({"run_id": result.run_id, **result.summary, "warnings": result.warnings, "repo": repo_json})
                return
    if json_out:
        print_json({"run_id": result.run_id, **result.summary, "warnings": result.warnings})
        return
    show(result)


def _show_repo(results: list[RepoResult], json_out: bool) -> None:
    if json_out:
        for r in results:
            print_json({"run_id": r.run_id, **r.summary})
        return
    for r in results:
        table = Table(
            "target",
            "resolved",
            "visible tests",
            "hidden tests",
            "gap",
            "tampered",
            *r.summary["targets"][next(iter(r.summary["targets"]))]["traps"],
            title=f"repo repair: {r.summary['task']} (run {r.run_id})",
            title_justify="left",
            caption="traps: attempts that passed every test probing the trap",
        )
        for target, row in r.summary["targets"].items():
            res = row["resolved"]
            table.add_row(
                target,
                f"{res['k']}/{res['n']} [{res['low']:.0%}, {res['high']:.0%}]",
                _pct(row["visible_pass_rate"]),
                _pct(row["hidden_pass_rate"]),
                _pct(row["gap"]),
                str(row.get("tampered", 0)),
                *(f"{v}/{row['attempts']}" for v in row["traps"].values()),
            )
        console().print(table)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _regrade_options(needs_sandbox: bool, unsafe: bool) -> EvalOptions:
    """The sandbox for re-grading: required when code suites were named, else used where there is one (code items
    in the stored run are otherwise graded as errors by the sandbox run)."""
    if needs_sandbox or unsafe:
        return EvalOptions(sandbox=sandbox_kind(unsafe))
    try:
        return EvalOptions(sandbox=sandbox_kind(unsafe))
    except UsageError:
        return EvalOptions()


def _suites(names: list[str]) -> list[str]:
    known = [*builtin_suites(), "needle", "repo", "replay"]
    out: list[str] = []
    for name in names:
        for one in FULL if name == "full" else (name,):
            if one not in known:
                raise UsageError(f"no eval suite {one!r}", hint=f"one of {', '.join(known)}, or full")
            if one not in out:
                out.append(one)
    return out


def _lengths(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--needle-lengths wants token counts like 2000,8000, got {text!r}") from None
    if not values or min(values) < 100:
        raise UsageError(f"--needle-lengths wants sizes of at least 100 tokens, got {text!r}")
    return values


def _rate(acc: dict[str, Any]) -> str:
    if not acc["n"]:
        return "-"
    return f"{acc['k']}/{acc['n']} {acc['rate']:.0%} [{acc['low']:.0%}, {acc['high']:.0%}]"


def show(result: EvalResult) -> None:
    out = console()
    table = Table(
        "target",
        "suite",
        "correct",
        "format\nviolation",
        "wrong",
        "error",
        "timeout",
        "strict accuracy",
        "semantic accuracy",
        title=f"eval {result.run_id}",
        title_justify="left",
        caption="k/n, with the 95% Wilson interval; semantic = correct + format violations",
    )
    for target, data in result.summary["targets"].items():
        for suite, acc in [*data["suites"].items(), ("all", data["all"])]:
            counts = acc["outcomes"]
            table.add_row(
                target,
                suite,
                *(str(counts[k]) for k in ("correct", "format_violation", "wrong", "error", "timeout")),
                _rate(acc["strict"]),
                _rate(acc["semantic"]),
            )
    out.print(table)
    for line in verdicts(result.summary):
        out.print(line)
    for warning in result.warnings:
        out.print(f"[yellow]warning:[/] {warning}")


def verdicts(summary: dict[str, Any]) -> list[str]:
    """The lines a person wants: violations against wrong answers, reliability, and who is better."""
    lines = []
    for target, data in summary["targets"].items():
        c = data["all"]["outcomes"]
        lines.append(
            f"{target}: {c['correct']} correct, {c['format_violation']} format violations, {c['wrong']} wrong, "
            f"{c['error']} errors, {c['timeout']} timeouts"
        )
        rep = data.get("repeats")
        if rep and rep["items"]:
            lines.append(
                f"{target}: over {rep['k']} repeats pass@{rep['k']} {rep['pass_at_k']:.2f}, "
                f"pass^{rep['k']} {rep['pass_hat_k']:.2f}, {rep['flip_rate']:.0%} of items changed outcome"
            )
    pair = summary.get("paired")
    if pair:
        s = pair["strict"]
        lines.append(
            f"{pair['first']} vs {pair['second']} (strict, McNemar over {s['items']} items: "
            f"{s['only_first']} only the first, {s['only_second']} only the second, p={s['p']:.3f}): {s['verdict']}"
        )
    return lines
