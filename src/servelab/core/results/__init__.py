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
    Relieved,
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
from servelab.core.results.sessions import SessionFigures, SessionOutcome, TurnFigures
from servelab.core.results.stored import VERSIONS, AnyResult, load_result, save_result
from servelab.core.results.sweep import SweepRun

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
    "Relieved",
    "Repeats",
    "Replay",
    "Reply",
    "RepoRun",
    "RepoTarget",
    "Resolved",
    "Row",
    "RunResult",
    "Scalar",
    "SessionFigures",
    "SessionOutcome",
    "SloSearch",
    "Status",
    "Step",
    "SweepRun",
    "TargetEval",
    "TurnFigures",
    "load_result",
    "save_result",
]
