"""A plan run and a check run as sections: will it fit, and what each step of a check answered."""

from __future__ import annotations

from servelab.core.results import CheckRun, PlanRun
from servelab.report.model import Section, Table, fmt

GIB = 2**30


def plan_section(out: Section, result: PlanRun) -> None:
    plan = result.plan
    rows = [
        ["model", plan.model],
        ["GPU", plan.gpu],
        ["engine", plan.engine],
        ["weights (GiB)", fmt(plan.weights.gib, 2)],
        ["KV memory (GiB)", fmt(plan.kv_pool_bytes / GIB, 2)],
        ["KV cache size (tokens)", fmt(plan.capacity.tokens)],
        ["sessions at the full context", fmt(plan.capacity.max_sequences, 2)],
        ["gpu_memory_utilization", fmt(plan.util_chosen, 2)],
        ["command", plan.command],
    ]
    out.tables.append(Table("Will it fit", ["figure", "value"], rows))
    out.verdicts.append(plan.verdict)
    if not plan.fits:
        out.problems += plan.reasons


def check_section(out: Section, result: CheckRun) -> None:
    rows = []
    for step in result.steps:
        status = (step.error and f"failed: {step.error}") or (step.skipped and f"skipped ({step.skipped})") or "done"
        rows.append([step.step, status, step.run_id or "-", str(len(step.verdicts))])
        out.verdicts += [f"{step.step}: {v}" for v in step.verdicts]
        out.problems += [f"{step.step}: {step.error}"] if step.error else []
    out.tables.append(Table("The steps of the check", ["step", "status", "run", "verdicts"], rows,
                            note="each step's verdicts are below"))  # fmt: skip
