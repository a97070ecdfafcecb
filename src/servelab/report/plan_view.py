"""A plan run and a check run as sections: will it fit, and what each step of a check answered."""

from __future__ import annotations

from servelab.core.results import CheckRun, PlanRun
from servelab.report.model import Section, Table, fmt, say

GIB = 2**30
CPU_ENGINES = ("vllm-cpu",)  # no GPU: gpu_memory_utilization means nothing there


def plan_section(out: Section, result: PlanRun) -> None:
    plan = result.plan
    rows = [
        ["model", plan.model],
        ["GPU" if plan.engine not in CPU_ENGINES else "where", plan.gpu],
        ["engine", plan.engine],
        ["weights (GiB)", fmt(plan.weights.gib, 2)],
        ["KV memory (GiB)", fmt(plan.kv_pool_bytes / GIB, 2)],
        ["KV cache size (tokens)", fmt(plan.capacity.tokens)],
        ["sessions at the full context", fmt(plan.capacity.max_sequences, 2)],
    ]
    if plan.engine not in CPU_ENGINES:
        rows += [["gpu_memory_utilization", fmt(plan.util_chosen, 2)], ["command", plan.command]]
    out.tables.append(Table("Will it fit", ["figure", "value"], rows))
    say(out, plan.verdict, "\n".join([*plan.reasons, *plan.notes]))


def check_section(out: Section, result: CheckRun) -> None:
    """The steps, each linked to its run's section; their verdicts are said once, by the steps' own sections (here
    only for a check shown without them: :func:`servelab.report.document.build_report` drops them then)."""
    rows, anchors = [], {}
    for step in result.steps:
        status = (step.error and "failed") or (step.skipped and f"skipped ({step.skipped})") or "done"
        rows.append([step.step, status, step.run_id or "-"])
        if step.run_id:
            anchors[step.run_id] = f"#run-{step.run_id}"
        for v in step.verdicts:
            say(out, f"{step.step}: {v}")
        out.problems += [f"{step.step}: {step.error}"] if step.error else []
    out.tables.append(Table("The steps of the check", ["step", "status", "run"], rows, anchors=anchors))
