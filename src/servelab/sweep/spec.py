"""A sweep written down (``--spec sweep.toml``): the same settings as the command line, every key known, a misspelled
one refused with the nearest (``core.known_keys``). A grid axis's values are a list (``"--max-num-seqs" = [4, 8]``;
``"-"`` leaves the flag out; ``true`` on a switch's list gives it), a point a string of flags.

    engine = "vllm"
    points = ["--max-num-seqs 4"]
    scenarios = ["code-chat"]
    concurrency = [1, 4]
    [grid]
    "--max-num-batched-tokens" = [512, 1024]
    VLLM_CPU_KVCACHE_SPACE = [1, 2]
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field

from servelab.core.errors import UsageError
from servelab.core.known_keys import StrictModel, read_table, validate
from servelab.sweep.grid import LEAVE_OUT, SWITCH_ON, Axis, Grid, make_grid

Value = str | int | float | bool


class SweepSpec(StrictModel):
    engine: str | None = None
    model: str | None = None
    config: str | None = None  # what the plan reads (a preset or folder), as --model-config
    grid: dict[str, list[Value]] = Field(default_factory=dict)
    points: list[str] = Field(default_factory=list)
    scenarios: list[str] | None = None
    concurrency: list[Annotated[int, Field(ge=1, le=1 << 20)]] | None = None
    sessions: list[Annotated[int, Field(ge=1, le=1 << 20)]] | None = None  # a session scenario's levels
    requests: int | None = Field(default=None, ge=1, le=1 << 24)
    max_tokens: int | None = Field(default=None, ge=1, le=1 << 24)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    evals: list[str] = Field(default_factory=list)  # eval suites asked at each point
    slo: str | None = None
    slo_turns: str | None = None  # session scenarios: "warm" judges the turns past each session's first
    gpu: str | None = None
    alongside: list[str] = Field(default_factory=list)
    try_all: bool | None = None
    start_timeout: float | None = Field(default=None, gt=0, le=86400)  # seconds; the CLI's own range

    def to_grid(self) -> Grid:
        axes = tuple(_axis(name, values) for name, values in self.grid.items())
        base = make_grid([], self.points)
        return Grid(axes, base.points)


def _axis(name: str, values: list[Value]) -> Axis:
    if not values:
        raise UsageError(f"sweep spec: grid {name!r} has no values")
    if name.startswith("-") and all(isinstance(v, bool) for v in values):
        return Axis(name, tuple(SWITCH_ON if v else LEAVE_OUT for v in values), "switch")
    words = tuple(dict.fromkeys(_word(v) for v in values))
    kind = "flag" if name.startswith("-") else "env"
    if kind == "env" and not name.replace("_", "").isalnum():
        raise UsageError(f"sweep spec: grid {name!r} is neither a flag (starting with -) nor an environment variable")
    return Axis(name, words, kind)


def _word(value: Value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def read_spec(path: Path) -> SweepSpec:
    """The spec file (TOML, or JSON by its suffix), every key checked."""
    return validate(SweepSpec, read_table(path), str(path))
