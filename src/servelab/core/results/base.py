"""What every stored result has: its kind, its schema version, how the run ended and what it warns about."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Scalar = str | int | float | bool | None
Facts = dict[str, Scalar | list[Scalar] | dict[str, Scalar]]  # what a probe or a setting says of itself
Status = Literal["running", "complete", "failed", "interrupted"]


class Model(BaseModel):
    """Strict about unknown fields; NaN kept as NaN (a median of no samples is not zero)."""

    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")


class RunResult(Model):
    """The result of one run, stored whole and replaced as it grows, so a run cut short keeps its figures."""

    kind: str
    version: int = 1
    status: Status = "running"
    error: str | None = None  # what stopped a failed or interrupted run
    warnings: list[str] = Field(default_factory=list)

    def request_failures(self) -> list[str]:
        """One line per step, item group or condition whose requests failed, with why; none for a clean run."""
        return []
