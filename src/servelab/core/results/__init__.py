"""Typed, versioned results: one model per run kind, stored whole, rendered by every output."""

from servelab.core.results.base import Facts, RunResult, Scalar, Status
from servelab.core.results.bench import (
    BenchRun,
    Bottleneck,
    Cell,
    ClientLoad,
    EngineMetrics,
    Goodput,
    Limit,
    Row,
    SloSearch,
    Step,
)
from servelab.core.results.check import CheckRun, CheckStep
from servelab.core.results.coexist import CoexistRun, ConditionFigures, ListenerFigures, LlmFigures
from servelab.core.results.eval import (
    Accuracy,
    Channel,
    EvalRun,
    Paired,
    PairedTest,
    Repeats,
    Replay,
    Reply,
    RepoRun,
    RepoTarget,
    Resolved,
    TargetEval,
)
from servelab.core.results.plan import PlanFigures, PlanRun
from servelab.core.results.stored import VERSIONS, AnyResult, load_result, save_result

__all__ = [
    "VERSIONS",
    "Accuracy",
    "AnyResult",
    "BenchRun",
    "Bottleneck",
    "Cell",
    "Channel",
    "CheckRun",
    "CheckStep",
    "ClientLoad",
    "CoexistRun",
    "ConditionFigures",
    "EngineMetrics",
    "EvalRun",
    "Facts",
    "Goodput",
    "Limit",
    "ListenerFigures",
    "LlmFigures",
    "Paired",
    "PairedTest",
    "PlanFigures",
    "PlanRun",
    "Repeats",
    "Replay",
    "Reply",
    "RepoRun",
    "RepoTarget",
    "Resolved",
    "Row",
    "RunResult",
    "Scalar",
    "SloSearch",
    "Status",
    "Step",
    "TargetEval",
    "load_result",
    "save_result",
]
