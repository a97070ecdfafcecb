"""A plan run's result: the verdict, the memory budget and the command; the whole plan is kept (extra fields)."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from servelab.core.results.base import Model, RunResult


class Weights(Model):
    model_config = ConfigDict(extra="allow")
    bytes: int
    method: str
    gib: float


class Capacity(Model):
    model_config = ConfigDict(extra="allow")
    tokens: int
    max_sequences: float


class PlanFigures(Model):
    """The figures every output shows; the rest of what plan computed rides along as extra fields."""

    model_config = ConfigDict(extra="allow")
    model: str
    gpu: str
    engine: str
    fits: bool
    verdict: str
    reasons: list[str]
    weights: Weights
    kv_pool_bytes: int
    capacity: Capacity
    util_min: float | None
    util_max: float
    util_chosen: float
    command: str
    notes: list[str] = Field(default_factory=list)


class PlanRun(RunResult):
    kind: Literal["plan"] = "plan"
    plan: PlanFigures
