"""Repo repair: an agent fixes a broken package through shell and file tools in the sandbox; servelab grades
what it may change with the task's tests, run in a process that never imports the package (docs/repair-grading.md)."""

from servelab.eval.repair.agent import TOOLS, AgentLimits, Policy, Trajectory, chat_policy, run_agent
from servelab.eval.repair.grader import RepoGrade, grade_workdir, self_check
from servelab.eval.repair.harvest import Harvest, HarvestRules, harvest
from servelab.eval.repair.run import Attempt, RepoResult, run_repo, summarize_repo
from servelab.eval.repair.task import Task, builtin_tasks, load_task, tasks_root
from servelab.eval.repair.workspace import Workspace, agent_folder, remove_tree

__all__ = [
    "TOOLS",
    "AgentLimits",
    "Attempt",
    "Harvest",
    "HarvestRules",
    "Policy",
    "RepoGrade",
    "RepoResult",
    "Task",
    "Trajectory",
    "Workspace",
    "agent_folder",
    "builtin_tasks",
    "chat_policy",
    "grade_workdir",
    "harvest",
    "load_task",
    "remove_tree",
    "run_agent",
    "run_repo",
    "self_check",
    "summarize_repo",
    "tasks_root",
]
