"""A session workload as data: how long a session's head, turns and replies are, how many turns, the think or tool
time between them, where the history is compacted and to how many tokens. Presets from the seeds, or a user's own
TOML file (an unknown key is refused, naming the nearest known one)."""

from __future__ import annotations

import difflib
import random
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from servelab.core.errors import UsageError
from servelab.core.known_keys import read_table

Tokens = Annotated[int, Field(ge=1, le=10_000_000)]


class Span(BaseModel):
    """A length drawn uniformly from ``low..high`` (a fixed one when equal); written as a number or ``[low, high]``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    low: Tokens
    high: Tokens

    @model_validator(mode="before")
    @classmethod
    def _from_short(cls, data: Any) -> Any:
        return _pair(data)

    @model_validator(mode="after")
    def _ordered(self) -> Span:
        if self.low > self.high:
            raise ValueError(f"low {self.low} is above high {self.high}")
        return self

    def draw(self, rng: random.Random) -> int:
        return rng.randint(self.low, self.high)

    def scaled(self, factor: float, floor: int = 1) -> Span:
        return Span(low=max(floor, round(self.low * factor)), high=max(floor, round(self.high * factor)))


class Think(BaseModel):
    """Seconds between an answer and the session's next turn (a person reading, a tool running): a fixed time, a
    uniform ``[low, high]``, or ``{exponential = MEAN}``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    low: float = Field(0.0, ge=0, le=86_400)
    high: float = Field(0.0, ge=0, le=86_400)
    exponential: float | None = Field(None, gt=0, le=86_400)

    @model_validator(mode="before")
    @classmethod
    def _from_short(cls, data: Any) -> Any:
        return _pair(data)

    @model_validator(mode="after")
    def _ordered(self) -> Think:
        if self.low > self.high:
            raise ValueError(f"low {self.low} is above high {self.high}")
        return self

    def draw(self, rng: random.Random) -> float:
        if self.exponential is not None:
            return rng.expovariate(1.0 / self.exponential)
        return rng.uniform(self.low, self.high)


def _pair(data: Any) -> Any:
    """``5`` -> low = high = 5; ``[1, 5]`` -> low 1, high 5; anything else is left to the model to refuse."""
    if isinstance(data, int | float) and not isinstance(data, bool):
        return {"low": data, "high": data}
    if isinstance(data, list | tuple) and len(data) == 2:
        return {"low": data[0], "high": data[1]}
    return data


class SessionSpec(BaseModel):
    """One session workload. Every session: a head (a system prompt or a repository, ``shared_tokens`` of it the
    same for every session, the rest its own), then ``turns`` turns, each adding new content (a user message, or
    with ``tool_share`` an assistant tool call and its result) and asking for a reply. When the next prompt would
    pass ``compact_at`` (default: the target's context less the reply), the history is replaced by a summary of
    ``summary_tokens`` and the session goes on from there. Concurrent sessions start together unless ``ramp_s``
    spreads their first turns evenly over that many seconds (session i at i x ramp_s / sessions). ``context`` is
    the context the lengths were written for: a preset on a shorter target is scaled to fit it (said in a warning);
    a user's own spec is refused instead."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field("sessions", min_length=1, max_length=100)
    description: str = ""
    sessions: int = Field(4, ge=1, le=100_000)  # concurrent sessions (closed), or sessions sent (with a rate)
    turns: int = Field(10, ge=1, le=100_000)
    head_tokens: Span
    shared_tokens: int = Field(0, ge=0, le=10_000_000)
    turn_tokens: Span
    output_tokens: Span
    tool_share: float = Field(0.0, ge=0.0, le=1.0)
    think_time_s: Think = Field(default_factory=lambda: Think.model_validate(0))
    ramp_s: float = Field(0.0, ge=0.0, le=86_400.0, allow_inf_nan=False)  # closed: first turns spread over this
    summary_tokens: Tokens = 1024
    compact_at: Tokens | None = None
    context: Tokens | None = None
    preset: bool = Field(False, exclude=True)  # built in: scaled to a shorter target rather than refused

    @model_validator(mode="after")
    def _shared_in_head(self) -> SessionSpec:
        if self.shared_tokens > self.head_tokens.low:
            raise ValueError(f"shared_tokens {self.shared_tokens} is above head_tokens' low {self.head_tokens.low}")
        return self


PRESETS: dict[str, dict[str, Any]] = {
    # Seed 003: "agentic coding: long contexts, often 100K+, tool calls, tens of concurrent agents, heavily
    # prefix-cache-dependent"; seed 000 fears "reconstructing a conversation after compaction".
    "agentic-coding": {
        "description": "coding agents: a 20-40K repository head, tool results of 1-8K tokens, growing past 100K with "
        "compaction at the context limit",
        "sessions": 4,
        "turns": 30,
        "head_tokens": [20_000, 40_000],
        "shared_tokens": 2_000,
        "turn_tokens": [1_000, 8_000],
        "output_tokens": [200, 800],
        "tool_share": 0.85,
        "think_time_s": [0.2, 2.0],
        "summary_tokens": 4_000,
        "context": 131_072,
    },
    # Seed 000: character chat, a persona and a long conversation in short turns.
    "character-chat-sessions": {
        "description": "character chat: a persona head, short turns, long histories",
        "sessions": 8,
        "turns": 60,
        "head_tokens": [1_500, 3_000],
        "shared_tokens": 0,
        "turn_tokens": [20, 150],
        "output_tokens": [60, 250],
        "tool_share": 0.0,
        "think_time_s": [1.0, 6.0],
        "summary_tokens": 800,
        "context": 32_768,
    },
}


def preset_names() -> list[str]:
    return list(PRESETS)


def preset(name: str) -> SessionSpec:
    return SessionSpec.model_validate({"name": name, **PRESETS[name], "preset": True})


def read_spec(path: Path) -> SessionSpec:
    """A user's session spec (TOML); a wrong or unknown key is refused in a sentence, with the nearest known key."""
    raw = read_table(path)
    raw.setdefault("name", path.stem)
    return spec_from(raw, str(path))


def spec_from(raw: dict[str, Any], where: str) -> SessionSpec:
    """``raw`` as a spec, or a UsageError naming each problem (``where``: the file, for the message)."""
    if "preset" in raw:
        raise UsageError(f"{where}: unknown key 'preset'", hint=f"known keys: {', '.join(_known(SessionSpec))}")
    try:
        return SessionSpec.model_validate(raw)
    except ValidationError as exc:
        problems = [_problem(err) for err in exc.errors()]
        known = ", ".join(_known(SessionSpec))
        raise UsageError(f"{where}: {'; '.join(problems)}", hint=f"known keys: {known}") from None


def _known(model: type[BaseModel]) -> list[str]:
    return [k for k in model.model_fields if k != "preset"]


def _problem(err: Any) -> str:
    """One validation error as a sentence; an unknown key names the nearest known one."""
    loc = [str(x) for x in err["loc"] if not isinstance(x, int)]
    key = ".".join(loc) or "the spec"
    if err["type"] == "extra_forbidden":
        parent: dict[str, type[BaseModel]] = {"think_time_s": Think, "head_tokens": Span, "turn_tokens": Span,
                                              "output_tokens": Span}  # fmt: skip
        model = parent.get(loc[0], SessionSpec) if len(loc) > 1 else SessionSpec
        near = difflib.get_close_matches(loc[-1], _known(model), n=1)
        return f"unknown key {key!r}" + (f" (did you mean {near[0]!r}?)" if near else "")
    if err["type"] == "missing":
        return f"{key} is missing"
    return f"{key}: {err['msg']}"
