"""servelab eval: capability by axis, strict format and semantics kept apart, stored raw so it can be
re-graded offline."""

from servelab.eval.items import Item, builtin_suites
from servelab.eval.repair import AgentLimits, RepoResult, builtin_tasks, load_task, run_repo
from servelab.eval.run import EvalResult, load_items, regrade, run_eval
from servelab.eval.runner import EvalOptions
from servelab.eval.sandbox import sandbox_kind

__all__ = [
    "AgentLimits",
    "EvalOptions",
    "EvalResult",
    "Item",
    "RepoResult",
    "builtin_suites",
    "builtin_tasks",
    "load_items",
    "load_task",
    "regrade",
    "run_eval",
    "run_repo",
    "sandbox_kind",
]
