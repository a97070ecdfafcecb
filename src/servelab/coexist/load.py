"""The LLM side of a coexist condition, driven by servelab.load's runner: N streams of short chat (decode), back-to-back
long prompts with a unique head so none hits the prefix cache (prefill), or both; started before the probe and
cancelled when it is done (the requests cut off then are recorded as cancelled)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, replace

from servelab.coexist.conditions import Condition
from servelab.core.records import Labels, RequestRecord
from servelab.core.urls import api_base
from servelab.load.runner import Load, ScenarioRun, Target, fit_filler, room, token_counter
from servelab.load.scenarios import Scenario

DECODE = Scenario(
    name="llm-decode",
    system="You are a helpful assistant.",
    user="Write a long story about a lighthouse keeper and a storm.",
    max_tokens=256,
)
PREFILL = Scenario(name="llm-prefill", user="Summarize the document above in one sentence.", max_tokens=8)

STOP_GRACE_S = 30.0  # how long a cancelled load may take to end (its requests' cancellation is immediate)


@dataclass(frozen=True, slots=True)
class LlmLoad:
    decode_streams: int = 4
    decode_tokens: int = 256
    prefill_tokens: int = 32000
    prefill_streams: int = 1


async def fitted_prefill(target: Target, load: LlmLoad) -> tuple[Scenario, list[str]]:
    """The long-prompt scenario, its document fitted to ``prefill_tokens`` with the target's /tokenize once, and no
    longer than the target's context has room for (said in the notes: a prompt the server refuses measures nothing)."""
    count = token_counter(api_base(target.url), target.model, target.api_key)
    tokens, notes = load.prefill_tokens, []
    limit = room(target, PREFILL.max_tokens)
    if limit is not None and tokens > limit:
        notes.append(
            f"the prefill prompts are {limit:,} tokens, not {tokens:,}: {target.name}'s context is "
            f"{target.max_model_len:,} (lower --prefill-tokens, or serve a longer --max-model-len)"
        )
        tokens = limit
    text, lines = await fit_filler(tokens, "coexist", count)
    if lines is None:
        notes.append(f"no /tokenize on {target.name}: {tokens} tokens is an estimate")
    scenario = replace(PREFILL, prefix_tokens=tokens, prefix_text=text, concurrency=load.prefill_streams)
    return scenario, notes


class Background:
    """The LLM requests of one condition, running until ``stop``."""

    def __init__(self, target: Target, sink: Callable[[RequestRecord], None]) -> None:
        self.target, self.sink = target, sink
        self._tasks: list[asyncio.Task[object]] = []
        self._runs: list[ScenarioRun] = []

    def start(self, condition: Condition, load: LlmLoad, prefill: Scenario | None) -> None:
        steps: list[Scenario] = []
        if condition.decode:
            steps.append(replace(DECODE, max_tokens=load.decode_tokens, concurrency=load.decode_streams))
        if condition.prefill and prefill is not None:
            steps.append(prefill)
        for scenario in steps:
            labelled = replace(scenario, name=f"{scenario.name}@{condition.name}")
            load_ = Load(requests=None, warmup=0, max_consecutive_errors=20, keep_cancelled=True)  # until stopped
            run = ScenarioRun(self.target, labelled, load_, self.sink, Labels(condition=condition.name))
            self._runs.append(run)
            self._tasks.append(asyncio.create_task(run.run()))

    async def stop(self) -> list[str]:
        """Halt and cancel what is in flight, waiting at most ``STOP_GRACE_S``; return why a step stopped on its own
        (errors in a row) or did not stop, if it did."""
        for run in self._runs:
            run.halt()  # a loop whose cancellation is lost still sends nothing more
        for task in self._tasks:
            task.cancel()
        _, pending = await asyncio.wait(self._tasks, timeout=STOP_GRACE_S) if self._tasks else (set(), set())
        notes = [f"{r.scenario.name}: {r.result.stopped_early}" for r in self._runs if r.result.stopped_early]
        for run, task in zip(self._runs, self._tasks, strict=True):
            if task in pending:
                notes.append(f"{run.scenario.name}: the LLM load did not stop within {STOP_GRACE_S:g} s; left behind")
            elif not task.cancelled() and isinstance(task.exception(), Exception):
                exc = task.exception()
                notes.append(f"{run.scenario.name}: the LLM load failed: {type(exc).__name__}: {exc}")
        self._tasks, self._runs = [], []
        return notes
