"""Running coexist: the probe under each condition in turn, interleaved over repeats, the LLM load beside it, stored."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from servelab.coexist.load import CONDITIONS, Background, LlmLoad, fitted_prefill
from servelab.coexist.playback import Chunk, Utterance
from servelab.coexist.probes import Probe
from servelab.coexist.summary import figures
from servelab.core.errors import UsageError
from servelab.core.recorder import RunRecorder, describe
from servelab.core.records import RequestRecord
from servelab.core.results import CoexistRun, ConditionFigures, Facts, LlmFigures, load_result
from servelab.core.store import STATUS_COMPLETE, STATUS_FAILED, RunStore
from servelab.core.summary import summarize
from servelab.engines.manifest import build_manifest
from servelab.load.runner import Target

SHARING_MODES = ("time-sliced", "mps", "green")


def parse_sharing(spec: str) -> Facts:
    """``time-sliced`` (separate processes, the default), ``mps[:PCT]`` (CUDA MPS, the LLM side capped at PCT% of
    the SMs by whoever started it), or ``green:SMS`` (the GPU probe in a green context of SMS SMs)."""
    mode, _, value = spec.partition(":")
    if mode not in SHARING_MODES or (mode == "green" and not value.isdigit()) or (value and not value.isdigit()):
        raise UsageError(f"--sharing is time-sliced, mps[:PCT] or green:SMS, got {spec!r}")
    out: Facts = {"mode": mode}
    if mode == "mps" and value:
        out["llm_active_thread_pct"] = int(value)
    if mode == "green":
        out["probe_sms"] = int(value)
    return out


@dataclass
class CoexistOptions:
    conditions: tuple[str, ...] = CONDITIONS
    repeats: int = 3
    utterances: int = 10  # per condition and repeat
    lookaheads_ms: tuple[float, ...] = (0.0, 300.0, 500.0)
    load: LlmLoad = field(default_factory=LlmLoad)
    settle_s: float = 2.0  # the LLM load runs this long before the probe starts
    min_chunks: int = 1000
    sharing: Facts = field(default_factory=lambda: {"mode": "time-sliced"})


@dataclass
class CoexistResult:
    run_id: str
    probe: Facts
    sharing: Facts
    conditions: list[ConditionFigures]
    utterances: list[Utterance]
    warnings: list[str] = field(default_factory=list)
    failed: str | None = None

    def stored(self) -> CoexistRun:
        """The typed result every output renders (the utterances are kept beside it as raw material)."""
        return CoexistRun(
            probe=self.probe,
            sharing=self.sharing,
            conditions=self.conditions,
            warnings=self.warnings,
            error=self.failed,
        )


def _check(options: CoexistOptions, target: Target | None) -> None:
    unknown = [c for c in options.conditions if c not in CONDITIONS]
    if unknown:
        raise UsageError(f"unknown condition(s) {', '.join(unknown)}", hint=f"choose from {', '.join(CONDITIONS)}")
    if target is None and any(c != "alone" for c in options.conditions):
        raise UsageError("conditions with LLM load need --target NAME=URL (or --conditions alone)")


def run_coexist(
    store: RunStore,
    probe: Probe,
    target: Target | None,
    options: CoexistOptions,
    *,
    args: dict[str, Any] | None = None,
    progress: Callable[[str, int], None] | None = None,
) -> CoexistResult:
    """Run every condition ``repeats`` times (order rotated each repeat), store the LLM records, the utterances
    and the per-condition figures, and return them. A failure part-way keeps what was measured."""
    _check(options, target)
    targets = {target.name: target.url} if target else {}
    run = RunRecorder(store, "coexist", build_manifest("coexist", args or {}, targets, {"sharing": options.sharing}))
    session = _Session(run, probe, target, options, progress)
    try:
        asyncio.run(session.run())
    except Exception as exc:  # keep the measured part, say what broke
        session.failed = describe(exc)
    except BaseException as exc:  # Ctrl-C or a signal: keep what was measured, mark it interrupted, stop
        run.result(session.result().stored())
        run.fail(exc)
        raise
    result = session.result()
    run.result(result.stored())
    run.summary("coexist/utterances", {"utterances": [_utterance_dict(u) for u in result.utterances]})
    run.finish(STATUS_FAILED if session.failed else STATUS_COMPLETE, session.failed)
    return result


class _Session:
    def __init__(
        self,
        run: RunRecorder,
        probe: Probe,
        target: Target | None,
        options: CoexistOptions,
        progress: Callable[[str, int], None] | None,
    ) -> None:
        self.recorder, self.run_id, self.probe, self.target, self.options = run, run.run_id, probe, target, options
        self.progress = progress
        self.utterances: list[Utterance] = []
        self.records: list[RequestRecord] = []
        self.warnings: list[str] = []
        self.probe_info: Facts = {}
        self.failed: str | None = None

    def _sink(self, record: RequestRecord) -> None:
        self.records.append(record)
        self.recorder.sink(record)

    async def run(self) -> None:
        self.probe_info = await self.probe.start()
        try:
            prefill = None
            if self.target and any(c in ("prefill", "both") for c in self.options.conditions):
                prefill, notes = await fitted_prefill(self.target, self.options.load)
                self.warnings += notes
            for rep in range(self.options.repeats):
                order = self.options.conditions[rep % len(self.options.conditions) :]
                for condition in order + self.options.conditions[: rep % len(self.options.conditions)]:
                    await self._segment(condition, prefill)
        finally:
            await self.probe.close()

    async def _segment(self, condition: str, prefill: Any) -> None:
        background = Background(self.target, self._sink) if self.target else None
        if background and condition != "alone":
            background.start(condition, self.options.load, prefill)
            await asyncio.sleep(self.options.settle_s)
        try:
            got = await self.probe.run(self.options.utterances, condition)
        finally:
            if background:
                self.warnings += await background.stop()
        self.utterances += got
        if self.progress:
            self.progress(condition, sum(len(u.chunks) for u in got))

    def result(self) -> CoexistResult:
        conditions = []
        for condition in self.options.conditions:
            mine = [u for u in self.utterances if u.condition == condition]
            figs = figures(condition, mine, self.options.lookaheads_ms)
            figs.llm = _llm_figures([r for r in self.records if r.labels.condition == condition])
            if figs.chunks < self.options.min_chunks:
                self.warnings.append(
                    f"{condition}: p99 rests on {figs.chunks} chunks (at least {self.options.min_chunks} wanted; "
                    "raise --utterances or --repeats)"
                )
            conditions.append(figs)
        return CoexistResult(
            self.run_id, self.probe_info, self.options.sharing, conditions, self.utterances, self.warnings, self.failed
        )


def _llm_figures(records: Sequence[RequestRecord]) -> LlmFigures | None:
    if not records:
        return None
    s = summarize(records)
    return LlmFigures(
        requests=s.requests, ok=s.ok, errors=s.errors, ttft_ms=s.ttft_ms, tpot_ms=s.tpot_ms,
        aggregate_tok_s=s.aggregate_tok_s, failures=s.failures, failure_messages=s.failure_messages,
    )  # fmt: skip


def _utterance_dict(u: Utterance) -> dict[str, Any]:
    return {
        "condition": u.condition,
        "scheduled": u.scheduled_s,
        "error": u.error,
        "chunks": [[c.arrived_s - u.scheduled_s, c.audio_s] for c in u.chunks],
    }


def stored_result(store: RunStore, run_id: str) -> CoexistResult:
    """A stored coexist run, its figures computed again from the stored utterances (and LLM records)."""
    head = load_result(store, store.get_run(run_id))
    if not isinstance(head, CoexistRun):
        raise UsageError(f"run {run_id} is not a coexist run")
    raw = store.summaries(run_id).get("coexist/utterances", {}).get("utterances", [])
    utterances = [
        Utterance(
            u["scheduled"], tuple(Chunk(u["scheduled"] + t, a) for t, a in u["chunks"]), u["condition"], u["error"]
        )
        for u in raw
    ]
    records = store.records(run_id)
    conditions = []
    for stored in head.conditions:
        name = stored.condition
        lookaheads = [lf.lookahead_ms for lf in stored.listeners]
        figs = figures(name, [u for u in utterances if u.condition == name], lookaheads)
        figs.llm = _llm_figures([r for r in records if r.labels.condition == name])
        conditions.append(figs)
    return CoexistResult(run_id, head.probe, head.sharing, conditions, utterances, head.warnings, head.error)
