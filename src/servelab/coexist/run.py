"""Running coexist: the probe under each condition in turn, interleaved over repeats, the LLM load beside it, stored."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from servelab.coexist.baselines import llm_baselines, rebase, set_shares
from servelab.coexist.conditions import CONDITIONS, LLM_ONLY, Condition, parse_condition, with_baselines
from servelab.coexist.duration import DEFAULT_UTTERANCES, default_utterances, expected_s
from servelab.coexist.goals import Goals, judge
from servelab.coexist.gpu_share import gpu_summary
from servelab.coexist.load import Background, LlmLoad, fitted_prefill
from servelab.coexist.mitigations import LeaseHolder, Mitigation, mitigated
from servelab.coexist.playback import Chunk, Utterance
from servelab.coexist.probes import Probe
from servelab.coexist.summary import figures
from servelab.core import failures
from servelab.core.errors import StoreError, UsageError
from servelab.core.recorder import RunRecorder, describe
from servelab.core.records import ErrorClass, RequestRecord
from servelab.core.results import CoexistRun, ConditionFigures, Facts, LlmFigures, load_result
from servelab.core.stats import percentiles
from servelab.core.store import STATUS_COMPLETE, STATUS_FAILED, RunStore
from servelab.core.summary import prompt_tok_s, streamed_tok_s, summarize, ttft_ms
from servelab.engines.gpu_telemetry import GpuSampler
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
    utterances: int | None = None  # per condition and repeat (None: the fewest that bring min_chunks: .duration)
    lookaheads_ms: tuple[float, ...] = (0.0, 300.0, 500.0)
    load: LlmLoad = field(default_factory=LlmLoad)
    settle_s: float = 2.0  # the LLM load runs this long before the probe starts
    min_chunks: int = 1000
    sharing: Facts = field(default_factory=lambda: {"mode": "time-sliced"})
    goals: Goals = field(default_factory=Goals)
    llm_baselines: bool = True  # also run each LLM load with no probe, for the share the LLM kept
    mitigations: tuple[Mitigation, ...] = ()  # each runs the conditions with LLM load again, its own way
    baseline_s: float = 10.0  # how long an LLM-only baseline runs when no probe segment has set the pace
    reference: CoexistResult | None = None  # judge against this run's baselines (a mitigation on its own server)


@dataclass
class CoexistResult:
    run_id: str
    probe: Facts
    sharing: Facts
    conditions: list[ConditionFigures]
    utterances: list[Utterance]
    warnings: list[str] = field(default_factory=list)
    failed: str | None = None
    goals: dict[str, float] = field(default_factory=dict)
    reference: str | None = None  # the run whose baselines judged this one (coexist/baselines.py rebase)

    def stored(self) -> CoexistRun:
        """The typed result every output renders (the utterances are kept beside it as raw material)."""
        return CoexistRun(
            probe=self.probe,
            sharing=self.sharing,
            conditions=self.conditions,
            goals=self.goals,
            warnings=self.warnings,
            error=self.failed,
            reference=self.reference,
        )


def _check(options: CoexistOptions, target: Target | None, probes: int) -> list[Condition]:
    """The conditions to run, in order (with the LLM-only baselines when asked), each checked first."""
    names = with_baselines(options.conditions) if options.llm_baselines and target else options.conditions
    conditions = [parse_condition(n) for n in mitigated(names, options.mitigations) if not n.startswith("llm:")]
    conditions += [parse_condition(n) for n in names if n.startswith("llm:")]
    if target is None and any(c.llm for c in conditions):
        raise UsageError("conditions with LLM load need --target NAME=URL (or --conditions alone,avatar)")
    if probes < 2 and any(c.companions for c in conditions):
        raise UsageError("the avatar conditions need a second probe (--probe voice,avatar: the probes to run at once)")
    return conditions


def expected(probes: Sequence[Probe], target: Target | None, options: CoexistOptions) -> tuple[int, float]:
    """The utterances per condition and round (the options', else the fewest that bring ``min_chunks`` chunks),
    and the seconds the run should take (said before it starts)."""
    conditions = _check(options, target, len(probes))
    utterances = options.utterances or default_utterances(probes[0], options.repeats, options.min_chunks)
    probed = [c for c in conditions if c.probes]
    seconds = expected_s(probes, len(probed), sum(c.llm for c in probed), len(conditions) - len(probed),
                         options.repeats, utterances, options.settle_s)  # fmt: skip
    return utterances, seconds


def probe_names(probes: Sequence[Probe]) -> list[str]:
    """Each probe's name: its kind, numbered from the second of a kind (``http-audio``, ``http-audio-2``)."""
    seen: dict[str, int] = {}
    names = []
    for p in probes:
        seen[p.kind] = seen.get(p.kind, 0) + 1
        names.append(p.kind if seen[p.kind] == 1 else f"{p.kind}-{seen[p.kind]}")
    return names


def run_coexist(
    store: RunStore,
    probe: Probe | Sequence[Probe],
    target: Target | None,
    options: CoexistOptions,
    *,
    args: dict[str, Any] | None = None,
    progress: Callable[[str, int], None] | None = None,
) -> CoexistResult:
    """Run every condition ``repeats`` times (order rotated each repeat), store the LLM records, the utterances
    and the per-condition figures, and return them. Several probes run at once: the first in every condition, the
    others where the condition says ``avatar``; each probe's figures are its own. A failure part-way keeps what
    was measured."""
    probes = [probe] if not isinstance(probe, Sequence) else list(probe)
    conditions = _check(options, target, len(probes))
    options = replace(options, utterances=expected(probes, target, options)[0])
    targets = {target.name: target.url} if target else {}
    run = RunRecorder(store, "coexist", build_manifest("coexist", args or {}, targets, {"sharing": options.sharing}))
    session = _Session(run, probes, target, options, progress, conditions)
    gpu = GpuSampler()  # NVML on the run clock, where a GPU is visible
    if said := gpu.start():
        session.warnings.append(said)
    try:
        asyncio.run(session.run())
    except Exception as exc:  # keep the measured part, say what broke
        session.failed = describe(exc)
    except BaseException as exc:  # Ctrl-C or a signal: keep what was measured, mark it interrupted, stop
        _keep(run, session.result())
        run.summary("coexist/gpu", gpu_summary(gpu.stop(), session.segments))
        run.fail(exc)
        raise
    result = session.result()
    _keep(run, result)
    run.summary("coexist/gpu", gpu_summary(gpu.stop(), session.segments))
    run.finish(STATUS_FAILED if session.failed else STATUS_COMPLETE, session.failed)
    return result


def _keep(run: RunRecorder, result: CoexistResult) -> None:
    """Store the figures and every utterance (what ``stored_result`` recomputes the figures from)."""
    run.result(result.stored())
    run.summary("coexist/utterances", {"utterances": [_utterance_dict(u) for u in result.utterances]})


class _Session:
    def __init__(
        self,
        run: RunRecorder,
        probes: list[Probe],
        target: Target | None,
        options: CoexistOptions,
        progress: Callable[[str, int], None] | None,
        conditions: list[Condition],
    ) -> None:
        self.recorder, self.run_id, self.probes, self.target, self.options = run, run.run_id, probes, target, options
        self.progress, self.conditions, self.names = progress, conditions, probe_names(probes)
        self.utterances: list[Utterance] = []
        self.records: list[RequestRecord] = []
        self.warnings: list[str] = []
        self.probe_info: Facts = {}
        self.failed: str | None = None
        self._segment_s: list[float] = []  # how long the probe segments took: the baselines' length
        self.segments: list[tuple[str, float, float]] = []  # (condition, start, end) on perf_counter: GPU windows

    def _sink(self, record: RequestRecord) -> None:
        self.records.append(record)
        self.recorder.sink(record)

    async def run(self) -> None:
        infos = [await p.start() for p in self.probes]
        self.probe_info = infos[0] if len(infos) == 1 else {**infos[0], "probes": list[Any](self.names)}
        try:
            prefill = None
            if self.target and any(c.prefill for c in self.conditions):
                prefill, notes = await fitted_prefill(self.target, self.options.load)
                self.warnings += notes
            with_probes = [c for c in self.conditions if c.probes]
            for rep in range(self.options.repeats):
                shift = rep % max(1, len(with_probes))
                for condition in with_probes[shift:] + with_probes[:shift]:
                    await self._segment(condition, prefill)
                for condition in (c for c in self.conditions if not c.probes):
                    await self._baseline(condition, prefill)
        finally:
            for p in self.probes:
                await p.close()

    async def _segment(self, condition: Condition, prefill: Any) -> None:
        mitigation = next((m for m in self.options.mitigations if m.name == condition.mitigation), None)
        target = mitigation.target if mitigation else self.target
        background = Background(target, self._sink) if target else None
        if background and condition.llm:
            background.start(condition, self.options.load, prefill)
            await asyncio.sleep(self.options.settle_s)
        active = list(zip(self.names, self.probes, strict=True))[: None if condition.companions else 1]
        lease = LeaseHolder(mitigation.lease) if mitigation and mitigation.lease else None
        began = time.perf_counter()
        try:
            if lease:
                await lease.start()  # held while the probes speak: the gateway sends long prefills elsewhere
            try:
                count = self.options.utterances or DEFAULT_UTTERANCES  # set by run_coexist
                runs = await asyncio.gather(*(p.run(count, condition.name) for _, p in active))
            finally:
                if lease:
                    self.warnings += await lease.stop()
        finally:
            if background:
                self.warnings += await background.stop()
        self._segment_s.append(time.perf_counter() - began)
        self.segments.append((condition.name, began, began + self._segment_s[-1]))
        for (name, _), got in zip(active, runs, strict=True):
            self.utterances += [replace(u, probe=name) for u in got]
        if self.progress:
            self.progress(condition.name, sum(len(u.chunks) for got in runs for u in got))

    async def _baseline(self, condition: Condition, prefill: Any) -> None:
        """The LLM load with no probe, as long as a probe segment took (its throughput is the LLM's alone)."""
        assert self.target is not None
        background = Background(self.target, self._sink)
        background.start(condition, self.options.load, prefill)
        seconds = statistics.median(self._segment_s) if self._segment_s else self.options.baseline_s
        try:
            await asyncio.sleep(self.options.settle_s + seconds)
        finally:
            self.warnings += await background.stop()
        if self.progress:
            self.progress(condition.name, 0)

    def result(self) -> CoexistResult:
        conditions = condition_figures(
            [c.name for c in self.conditions], self.names, self.utterances, self.records, self.options.lookaheads_ms
        )
        for figs in conditions:
            if figs.probe and figs.chunks < self.options.min_chunks:
                self.warnings.append(
                    f"{figs.condition}{_of(figs, self.names)}: p99 rests on {figs.chunks} chunks (at least "
                    f"{self.options.min_chunks} wanted; raise --utterances or --repeats)"
                )
        self.warnings += [
            f"{f.condition}: the LLM load alone streamed no token; the conditions it is the baseline of have no share"
            for f in conditions
            if not f.probe
            and f.condition.startswith(LLM_ONLY)
            and not (f.llm and (f.llm.streamed_tok_s or f.llm.prompt_tok_s))
        ]
        judge(conditions, self.options.goals)
        result = CoexistResult(
            self.run_id,
            self.probe_info,
            self.options.sharing,
            conditions,
            self.utterances,
            self.warnings,
            self.failed,
            self.options.goals.as_dict(),
        )
        reference = self.options.reference
        return rebase(result, reference, self.options.goals) if reference is not None else result


def _of(figs: ConditionFigures, names: Sequence[str]) -> str:
    return f" ({figs.probe})" if len(names) > 1 else ""


def condition_figures(
    conditions: Sequence[str],
    probes: Sequence[str],
    utterances: Sequence[Utterance],
    records: Sequence[RequestRecord],
    lookaheads_ms: Sequence[float],
) -> list[ConditionFigures]:
    """One set of figures per condition and probe that ran in it (an LLM-only baseline: its LLM figures alone);
    the LLM's figures on the first probe's, with the share of its baseline's throughput it kept."""
    out: list[ConditionFigures] = []
    for name in conditions:
        llm = _llm_figures([r for r in records if r.labels.condition == name])
        ran = [p for p in probes if any(u.condition == name and u.probe in (p, "") for u in utterances)]
        for i, probe in enumerate(ran or [""]):
            mine = [u for u in utterances if u.condition == name and u.probe in (probe, "")]
            figs = figures(name, mine, lookaheads_ms)
            figs.probe, figs.llm = probe, llm if i == 0 else None
            out.append(figs)
    set_shares(out, llm_baselines(out))
    return out


def _llm_figures(records: Sequence[RequestRecord]) -> LlmFigures | None:
    """The load's figures; its TTFT also from the requests cut off at the condition's end after their first token
    (the finished ones alone leave out the slowest: a long prefill cut off late), and how many were still waiting
    for theirs (a TTFT longer than the condition)."""
    if not records:
        return None
    s = summarize(records)
    cut = [r for r in records if r.error == ErrorClass.CANCELLED]
    ttfts = [t for r in records if r.ok or r.error == ErrorClass.CANCELLED if (t := ttft_ms(r)) is not None]
    rounds = load_windows(records)
    failed = {k: n for k, n in s.failures.items() if k != failures.reason_of(ErrorClass.CANCELLED)}  # planned: apart
    return LlmFigures(
        requests=s.requests, ok=s.ok, errors=s.errors, ttft_ms=percentiles(ttfts), tpot_ms=s.tpot_ms,
        aggregate_tok_s=s.aggregate_tok_s, streamed_tok_s=streamed_tok_s(records), prompt_tok_s=prompt_tok_s(records),
        failures=failed, failure_messages={k: m for k, m in s.failure_messages.items() if k in failed},
        cut_before_first_token=sum(r.first_token_ns is None for r in cut), cancelled=len(cut),
        rounds_tok_s=[v for w in rounds if (v := streamed_tok_s(w)) is not None],
        rounds_prompt_tok_s=[v for w in rounds if (v := prompt_tok_s(w)) is not None],
    )  # fmt: skip


WINDOW_GAP_NS = 1_000_000_000  # a load's requests more than this apart from all before: the next load window


def load_windows(records: Sequence[RequestRecord]) -> list[list[RequestRecord]]:
    """A condition's LLM records split into its load windows (one per round): a load runs back to back while its
    window lasts, and the same condition's next round comes after other conditions' windows."""
    windows: list[list[RequestRecord]] = []
    end = None
    for r in sorted((r for r in records if r.sent_ns is not None), key=lambda r: r.sent_ns or 0):
        assert r.sent_ns is not None
        if end is None or r.sent_ns - end > WINDOW_GAP_NS:
            windows.append([])
        windows[-1].append(r)
        end = max(end or 0, r.end_ns or r.sent_ns)
    return windows


def _chunk_row(c: Chunk, t0: float) -> list[float]:
    """[arrival, audio] after the utterance's schedule; a frame's due time third."""
    return [c.arrived_s - t0, c.audio_s] + ([c.due_s - t0] if c.due_s is not None else [])


def _chunk_of(row: list[float], t0: float) -> Chunk:
    return Chunk(t0 + row[0], row[1], t0 + row[2] if len(row) > 2 else None)


def _utterance_dict(u: Utterance) -> dict[str, Any]:
    return {
        "condition": u.condition,
        "probe": u.probe,
        "scheduled": u.scheduled_s,
        "error": u.error,
        "chunks": [_chunk_row(c, u.scheduled_s) for c in u.chunks],
    }


def stored_result(store: RunStore, run_id: str) -> CoexistResult:
    """A stored coexist run, its figures computed again from the stored utterances (and LLM records), judged
    against the run it was rebased on when that run is in the same store."""
    result, reference = _stored(store, run_id)
    if not reference or reference == run_id:
        return result
    try:
        ref, _ = _stored(store, reference)
    except (StoreError, UsageError) as exc:
        result.warnings.append(f"judged against its own baselines: its reference run {reference}: {exc}")
        return result
    return rebase(result, ref)


def _stored(store: RunStore, run_id: str) -> tuple[CoexistResult, str | None]:
    info = store.get_run(run_id, kinds=("coexist",))  # "latest" or a prefix: the run's own id from here on
    run_id, head = info.run_id, load_result(store, info)
    if not isinstance(head, CoexistRun):
        raise UsageError(f"run {run_id} is not a coexist run")
    raw = store.summaries(run_id).get("coexist/utterances", {}).get("utterances", [])
    utterances = [
        Utterance(
            u["scheduled"],
            tuple(_chunk_of(row, u["scheduled"]) for row in u["chunks"]),
            u["condition"],
            u["error"],
            u.get("probe", ""),
        )
        for u in raw
    ]
    names = list(dict.fromkeys(c.condition for c in head.conditions))
    probes = list(dict.fromkeys(c.probe for c in head.conditions if c.probe)) or [""]
    lookaheads = next(([lf.lookahead_ms for lf in c.listeners] for c in head.conditions if c.listeners), [])
    conditions = condition_figures(names, probes, utterances, store.records(run_id), lookaheads)
    judge(conditions, Goals(**head.goals) if head.goals else Goals())
    result = CoexistResult(
        run_id, head.probe, head.sharing, conditions, utterances, list(head.warnings), head.error, head.goals
    )
    return result, head.reference
