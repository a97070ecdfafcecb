"""`servelab eval`: capability by axis, every target side by side, strict and semantic apart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from servelab.cli._common import (
    ApiKeyOption,
    JsonOption,
    ModelOption,
    StoreOption,
    finite,
    open_store,
    print_json,
    refuse_failed,
    result_json,
    show_run,
    targets_from,
)
from servelab.cli.progress import steps
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
    target: list[str] = typer.Option(
        [], "--target", help="NAME=URL of an OpenAI-compatible server; repeat (default: $OPENAI_BASE_URL)."
    ),
    model: list[str] = ModelOption,
    api_key: list[str] = ApiKeyOption,
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
    finite(agent_timeout=agent_timeout, temperature=temperature, timeout=timeout)
    suites = _suites(suite)
    lengths = _lengths(needle_lengths)
    needs_sandbox = bool(set(suites) & set(CODE_SUITES))
    repo: list[RepoResult] = []
    result: EvalResult | None = None
    with open_store(store) as db:
        if regrade_run:
            result = regrade(db, regrade_run, _regrade_options(needs_sandbox, unsafe))
        else:
            options = EvalOptions(
                repeats=repeats,
                concurrency=concurrency,
                temperature=temperature,
                read_timeout=timeout,
                sandbox=sandbox_kind(unsafe) if needs_sandbox else None,
            )
            tasks = [load_task(t) for t in (task or builtin_tasks())] if "repo" in suites else []
            items = load_items([s for s in suites if s != "repo"], lengths, traces)
            targets = targets_from(
                target, model, api_key, quiet=json_out, needed_by="eval", hint="or --regrade RUN to grade a run again"
            )
            args = {"targets": target, "suites": suites, "repeats": repeats}
            limits = AgentLimits(max_steps=max_steps, timeout_s=agent_timeout)
            repo = [
                run_repo(db, targets, t, options.sandbox or "bwrap", repeats=repeats, limits=limits, args=args)
                for t in tasks
            ]
            if items:
                with steps(not json_out) as progress:
                    progress.start(
                        f"{len(items)} items on {len(targets)} target(s)", len(items) * repeats * len(targets)
                    )
                    result = run_eval(db, targets, items, options, on_record=progress.record, args=args)
        runs = [r.run_id for r in repo] + ([result.run_id] if result else [])
        if json_out:
            print_json(_json(result, repo))
        else:
            for run_id in runs:
                show_run(db, run_id)
    refuse_failed(result.stored if result else None)


def _json(result: EvalResult | None, repo: list[RepoResult]) -> dict[str, Any]:
    """The eval run's result as JSON (targets, paired, replies), the repo runs' beside it."""
    repo_json = [{"run_id": r.run_id, **result_json(r.stored)} for r in repo if r.stored]
    if result is None:
        return repo_json[0] if len(repo_json) == 1 else {"repo": repo_json}
    data = {"run_id": result.run_id, **result_json(result.stored), "warnings": result.warnings}
    return {**data, "repo": repo_json} if repo_json else data


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
