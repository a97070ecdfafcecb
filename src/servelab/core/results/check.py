"""A check run's result: which steps ran, the run each stored, and each step's verdict or what stopped it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from servelab.core.results.base import Model, RunResult


class CheckStep(Model):
    step: str  # plan, bench, eval, coexist
    run_id: str | None = None
    skipped: str | None = None
    error: str | None = None
    verdicts: list[str] = Field(default_factory=list)


class CheckRun(RunResult):
    kind: Literal["check"] = "check"
    steps: list[CheckStep] = Field(default_factory=list)
