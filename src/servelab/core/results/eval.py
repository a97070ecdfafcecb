"""An eval run's result (accuracies with intervals, every graded reply) and a repo-repair run's."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from servelab.core.results.base import Model, RunResult


class Channel(Model):
    k: int
    n: int
    rate: float | None
    low: float | None
    high: float | None


class Accuracy(Model):
    n: int
    outcomes: dict[str, int]  # correct, format_violation, wrong, error, timeout
    strict: Channel
    semantic: Channel


class Repeats(Model):
    k: int
    items: int
    pass_at_k: float | None
    pass_hat_k: float | None
    flip_rate: float | None


class Replay(Model):
    turns: int
    tool_choice_agreement: float
    argument_match: float


class TargetEval(Model):
    all: Accuracy
    suites: dict[str, Accuracy]
    categories: dict[str, Accuracy] = Field(default_factory=dict)
    repeats: Repeats | None = None
    replay: Replay | None = None


class PairedTest(Model):
    channel: str
    items: int
    only_first: int
    only_second: int
    p: float
    verdict: str


class Paired(Model):
    first: str
    second: str
    strict: PairedTest
    semantic: PairedTest


class Reply(Model):
    """One graded reply: which item, how it was graded and why, and what the model said."""

    target: str
    suite: str
    item: str
    category: str = ""
    repeat: int
    outcome: str
    strict: bool
    semantic: bool
    detail: str = ""
    request_id: str = ""
    prompt_tokens: int | None = None
    reply: str = ""  # the start of the model's text, for a person to see what it answered
    error: str | None = None  # the request's failure, as the server said it


class EvalRun(RunResult):
    kind: Literal["eval"] = "eval"
    sandbox: str | None = None
    targets: dict[str, TargetEval] = Field(default_factory=dict)
    paired: Paired | None = None
    replies: list[Reply] = Field(default_factory=list)
    skipped: list[str] = Field(default_factory=list)  # items never sent, with why (longer than the target's context)

    def request_failures(self) -> list[str]:
        """Per target, the replies whose request failed (the server refused or broke off), with the first reason."""
        out = []
        for target in dict.fromkeys(r.target for r in self.replies):
            failed = [r for r in self.replies if r.target == target and r.error]
            if failed:
                out.append(f"{target}: {len(failed)} item(s) not answered, the request failed: {failed[0].error}")
        return out


class Resolved(Model):
    k: int
    n: int
    low: float
    high: float


class RepoTarget(Model):
    resolved: Resolved
    outcomes: dict[str, int]
    visible_pass_rate: float | None
    hidden_pass_rate: float | None
    gap: float | None
    traps: dict[str, int]
    tampered: int = 0  # attempts whose package process answered with what is not plain data (older runs: none)
    errors: list[str] = Field(default_factory=list)
    attempts: int
    stopped: list[str | None] = Field(default_factory=list)


class RepoRun(RunResult):
    kind: Literal["repo"] = "repo"
    task: str
    targets: dict[str, RepoTarget] = Field(default_factory=dict)
