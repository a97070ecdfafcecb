"""The repo-repair eval: per target and repeat, a fresh copy of the task's repo (a size-capped folder of its
own), the agent loop, then grading with the hidden tests; a per-trap matrix and the visible-vs-hidden gap.
An attempt that fails in any way is graded ``error`` with the reason and the eval goes on to the next."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from servelab.core.recorder import recording
from servelab.core.records import Labels, RequestRecord
from servelab.core.results import RepoRun
from servelab.core.stats import wilson_interval
from servelab.core.store import RunStore
from servelab.engines.manifest import build_manifest
from servelab.eval.grade import Outcome
from servelab.eval.mounts import hide
from servelab.eval.repair.agent import AgentLimits, Policy, Trajectory, chat_policy, run_agent
from servelab.eval.repair.grader import RepoGrade, grade_workdir
from servelab.eval.repair.task import Task
from servelab.eval.repair.workspace import Workspace, agent_folder
from servelab.eval.runtime import check_runtime
from servelab.load.runner import Target

PolicyFactory = Callable[[Target, Callable[[RequestRecord], None], Labels], Policy]


@dataclass
class Attempt:
    target: str
    repeat: int
    trajectory: Trajectory
    grade: RepoGrade

    @property
    def outcome(self) -> Outcome:
        if self.grade.resolved:
            return Outcome.CORRECT
        if self.grade.error or self.trajectory.stopped == "error":
            return Outcome.ERROR
        if self.trajectory.stopped == "timeout":
            return Outcome.TIMEOUT
        return Outcome.WRONG


@dataclass
class RepoResult:
    run_id: str
    attempts: list[Attempt] = field(default_factory=list)
    stored: RepoRun | None = None  # what every output renders


def _default_policy(timeout: float) -> PolicyFactory:
    return lambda target, sink, labels: chat_policy(target, sink, labels, timeout)


def run_repo(
    store: RunStore,
    targets: Sequence[Target],
    task: Task,
    kind: str,
    *,
    repeats: int = 1,
    limits: AgentLimits | None = None,
    policy: PolicyFactory | None = None,
    args: dict[str, Any] | None = None,
) -> RepoResult:
    """Every target ``repeats`` times on ``task``; model calls stored as they finish, one summary per attempt."""
    limits = limits or AgentLimits()
    check_runtime(kind)  # before any agent runs: a runtime that cannot grade stops the eval with its reason
    for secret in (task.root, store.path, *(store.path.with_name(store.path.name + x) for x in ("-wal", "-shm"))):
        hide(secret)  # never in the agent's sandbox, even where servelab and its store live under /usr
    make_policy = policy or _default_policy(limits.shell.timeout_s * 2)
    extra = {"task": task.name, "sandbox": kind, "repeats": repeats, "limits": asdict(limits)}
    manifest = build_manifest("eval", args or {}, {t.name: t.url for t in targets}, extra)
    with recording(store, "eval", manifest) as run:
        result = RepoResult(run.run_id)
        for target in targets:
            for repeat in range(repeats):
                where = Labels(step=f"repo/{task.name}#{repeat}", suite="repo", item=task.name, repeat=repeat)
                attempt = _attempt(task, target, repeat, kind, limits, make_policy(target, run.sink, where))
                result.attempts.append(attempt)
                run.summary(
                    f"repo/{target.name}/{repeat}",
                    {"outcome": attempt.outcome.value, "grade": attempt.grade.to_dict(task),
                     "trajectory": attempt.trajectory.to_dict()},
                )  # fmt: skip
            result.stored = summarize_repo(task, result.attempts)  # stored as each target ends
            run.result(result.stored)
    return result


def _attempt(task: Task, target: Target, repeat: int, kind: str, limits: AgentLimits, policy: Policy) -> Attempt:
    trajectory = Trajectory([])
    try:
        with agent_folder(task.repo) as (work, size_limited):
            workspace = Workspace(work, kind, limits.shell)
            trajectory = asyncio.run(run_agent(policy, task.instructions, workspace, limits))
            grade = grade_workdir(task, work, kind)
            grade.harvest["workdir_size_limited"] = size_limited
    except Exception as exc:  # a hostile folder must cost this attempt only, never the eval
        grade = RepoGrade(error=f"grading failed: {type(exc).__name__}: {exc}")
        grade.passed = dict.fromkeys(sorted(task.all_tests), False)
    return Attempt(target.name, repeat, trajectory, grade)


def summarize_repo(task: Task, attempts: Sequence[Attempt]) -> RepoRun:
    """Per target: resolved k/n (Wilson), visible and hidden pass rates and their gap, and how often each trap
    was handled."""
    out: dict[str, Any] = {"task": task.name, "targets": {}}
    for target in dict.fromkeys(a.target for a in attempts):
        mine = [a for a in attempts if a.target == target]
        resolved = sum(a.grade.resolved for a in mine)
        iv = wilson_interval(resolved, len(mine))
        visible = _pooled(a.grade.rate(task.visible) for a in mine)
        hidden = _pooled(a.grade.rate(task.all_tests - task.visible) for a in mine)
        traps = sorted(set(task.traps.values()))
        out["targets"][target] = {
            "resolved": {"k": resolved, "n": len(mine), "low": iv.low, "high": iv.high},
            "outcomes": {o.value: sum(a.outcome is o for a in mine) for o in Outcome},
            "visible_pass_rate": visible,
            "hidden_pass_rate": hidden,
            "gap": None if visible is None or hidden is None else visible - hidden,
            "traps": {t: sum(a.grade.traps(task).get(t, False) for a in mine) for t in traps},
            "tampered": sum(a.grade.tampered for a in mine),
            "errors": [a.grade.error for a in mine if a.grade.error],
            "attempts": len(mine),
            "stopped": [a.trajectory.stopped for a in mine],
        }
    return RepoRun.model_validate(out)


def _pooled(rates: Any) -> float | None:
    passed = total = 0
    for k, n in rates:
        passed, total = passed + k, total + n
    return passed / total if total else None
