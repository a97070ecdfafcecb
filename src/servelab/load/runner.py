"""Drive a scenario against a target: closed-loop concurrency or an open-loop rate, records as they finish."""

from __future__ import annotations

import asyncio
import itertools
import math
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from servelab.core.records import Labels, RequestRecord
from servelab.core.results import ClientLoad
from servelab.engines.client import ClientOptions, StreamClient
from servelab.engines.control import AsyncEngineAPI
from servelab.load.arrivals import ClosedLoop, ColdThenWarm, OpenLoop, arrivals_for, indices
from servelab.load.cycles import cycling_replies
from servelab.load.monitor import ClientMonitor
from servelab.load.scenarios import Scenario, filler_text

CHAT_MARGIN = 64  # tokens a chat template and the system prompt add around a prompt
Sink = Callable[[RequestRecord], None]


@dataclass(frozen=True, slots=True)
class Load:
    requests: int | None = 5  # measured requests per scenario and target (None: until cancelled or duration_s)
    concurrency: int | None = None  # None: the scenario's own
    rate: float | None = None  # requests per second, open loop
    arrival: Literal["poisson", "constant"] = "poisson"
    duration_s: float | None = None  # stop scheduling after this long
    warmup: int = 1
    max_tokens: int | None = None
    prefix_tokens: int | None = None
    # How output lengths are fixed: "ignore_eos" (as vllm bench serve and GuideLLM), "min_tokens" (ignore_eos and
    # min_tokens = max_tokens, for engines that ignore ignore_eos), or "off" (the model stops where it likes)
    fixed_output: Literal["ignore_eos", "min_tokens", "off"] = "ignore_eos"
    # Sampling temperature of every request: 0 decodes greedily (as vllm bench serve); a model with random (dummy)
    # weights decoding greedily repeats a few tokens, so an MoE routes every stream to the same experts: sample
    # (1.0) to measure the experts a batch of real text would read
    temperature: float = 0.0
    seed: int = 0
    max_consecutive_errors: int = 5
    max_in_flight: int = 256  # open loop: more than this many unanswered requests means over-saturation
    unique_prefix: bool = True  # False: byte-identical requests, to match another tool's workload exactly
    keep_cancelled: bool = False  # True: a request cut off by the run's end is recorded too (as cancelled)
    workers: int | None = 1  # load-generating processes (None: chosen from the load and the cores)
    ray: str | None = None  # the load from actors on this Ray cluster ("auto" or HEAD:PORT; None: this host alone)
    per_stream: int = 0  # a closed loop sends at least this many requests per stream (bench.sizing; 0: ``requests``)


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    url: str
    model: str
    api_key: str | None = None
    max_model_len: int | None = None  # the context the server states (prompt + output), where it states one


def room(target: Target, output_tokens: int) -> int | None:
    """Prompt tokens the target has room for beside ``output_tokens`` (its context less a chat template's margin);
    None where it states no context."""
    if target.max_model_len is None:
        return None
    return target.max_model_len - output_tokens - CHAT_MARGIN


@dataclass
class ScenarioResult:
    target: str
    scenario: str
    records: list[RequestRecord] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    stopped_early: str | None = None
    clients: list[ClientLoad] = field(default_factory=list)  # one per load-generating process
    hosts: list[dict[str, Any]] = field(default_factory=list)  # Ray: each actor's node and clock offset (its bound)


@dataclass(frozen=True, slots=True)
class Share:
    """One process's part of a step: worker ``worker`` of ``workers``. A closed loop's streams are split between
    the processes and take request indices from one shared counter; an open loop's arrivals are drawn from one
    seeded schedule, every ``workers``-th to each, due from one start on the host's monotonic clock."""

    worker: int = 0
    workers: int = 1
    streams: int | None = None  # closed loop: this process's streams (None: all of the pattern's)
    take: Callable[[], int | None] | None = None  # closed loop: the next request index (None when all are taken)
    start_ns: int | None = None  # perf_counter_ns (CLOCK_MONOTONIC, one clock for the host's processes)


def stream_count(streams: int, requests: int | None) -> int:
    """A closed loop's streams: no more than there are requests to take (one more would only idle, and a
    --concurrency far above --requests made millions of them)."""
    return streams if requests is None else min(streams, requests)


def counter(requests: int | None) -> Callable[[], int | None]:
    """Request indices one process hands out in turn: 0, 1, ... ``requests`` of them (without end for None)."""
    upcoming = iter(indices(requests))
    return lambda: next(upcoming, None)


def payload(
    target: Target, scenario: Scenario, messages: list[dict[str, str]], load: Load, index: int = 0
) -> dict[str, Any]:
    """The request body: the output length --max-tokens gives, else the data's (or the synthetic draw's)."""
    max_tokens = load.max_tokens or scenario.output_tokens(index)
    body: dict[str, Any] = {
        "model": target.model,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": load.temperature,
    }
    if load.fixed_output != "off":
        body["ignore_eos"] = True  # vLLM / SGLang / llama.cpp extension; others ignore it
    if load.fixed_output == "min_tokens":
        body["min_tokens"] = max_tokens
    return body


class ScenarioRun:
    """One scenario on one target, recording every finished request through ``sink``."""

    def __init__(
        self,
        target: Target,
        scenario: Scenario,
        load: Load,
        sink: Sink,
        labels: Labels | None = None,
        ready: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.target, self.scenario, self.load, self.sink = target, scenario, load, sink
        self.ready = ready  # awaited once the step is prepared (warm-up done), before the measured load
        self.labels = labels or Labels()  # what the caller adds (coexist: the condition)
        self.client = StreamClient(target.url, target=target.name, options=ClientOptions(api_key=target.api_key))
        self.result = ScenarioResult(target.name, scenario.name)
        self.monitor = ClientMonitor()
        self._errors_in_row = 0
        self._halted = False

    def halt(self) -> None:
        """No new request after this one: a step run until stopped ends even where a cancellation was lost."""
        self._halted = True

    def _record(self, label: str) -> RequestRecord:
        phase = label.rpartition(":")[2] if label.endswith((":cold", ":warm")) else None
        pattern = arrivals_for(self.load, self.scenario)
        labels = replace(
            self.labels,
            step=self.scenario.name,
            level=pattern.concurrency if isinstance(pattern, ClosedLoop) else None,
            rate=pattern.rate if isinstance(pattern, OpenLoop) else None,
            phase="warmup" if label == "warmup" else phase,
            sweep_of=self.scenario.sweep_of,
        )
        return self.client.new_record("chat", scenario=label, labels=labels)

    async def _one(self, index: int, scheduled_ns: int | None, *, nonce: str, label: str, keep: bool) -> RequestRecord:
        messages = self.scenario.messages(index, nonce)
        record = self._record(label)
        self.monitor.sent()
        try:
            await self.client.send(
                "chat",
                payload(self.target, self.scenario, messages, self.load, index),
                record=record,
                scheduled_ns=scheduled_ns,
            )
        except asyncio.CancelledError:
            if keep and self.load.keep_cancelled:
                self.result.records.append(record)
                self.sink(record)
            raise
        finally:
            self.monitor.done()
        if keep:
            self.result.records.append(record)
            self.sink(record)
            self._errors_in_row = self._errors_in_row + 1 if record.error else 0
        return record

    def _unique(self, index: int) -> str:
        """Random from its first character, so no prompt shares even one cache block with another;
        empty when the load asks for byte-identical requests."""
        return f"{uuid.uuid4().hex[:12]} {index}" if self.load.unique_prefix else ""

    async def run(self) -> ScenarioResult:
        """The whole step in this process: fitted, warmed up, driven, its client load measured, checked."""
        await self.prepare()
        self.monitor.start()
        try:
            await self.drive(Share())
        finally:
            self.result.clients = [await self.monitor.stop()]
        self.result.warnings += cache_warnings(self.result.records, self.load, self.scenario)
        return self.result

    async def prepare(self) -> None:
        """What is done once per step before the measured load: lengths fitted to the target, the warm-up."""
        self.result.warnings += list(self.scenario.notes)
        if self.scenario.prefix_tokens and self.scenario.prefix_text is None:
            await self._fit_prefix()
        if self.scenario.synthetic is not None:
            await self._fit_synthetic()
        if any(p.reply and p.max_tokens is None for p in self.scenario.prompts) and self.load.max_tokens is None:
            await self._reply_lengths()
        for i in range(self.load.warmup):
            await self._one(i, None, nonce=self._unique(-1 - i), label="warmup", keep=False)
        if self.ready is not None:
            await self.ready()

    async def drive(self, share: Share) -> None:
        """This process's share of the measured load."""
        match arrivals_for(self.load, self.scenario):
            case ColdThenWarm():
                await self._cold_then_warm()
            case OpenLoop() as open_loop:
                await self._open_loop(open_loop, share)
            case ClosedLoop(concurrency):
                await self._closed_loop(concurrency, share)

    async def _fit_prefix(self) -> None:
        """Size the long prefix with the target's own /tokenize; say so when it has none."""
        target = self.scenario.prefix_tokens
        text, lines = await fit_filler(target, self.scenario.name, await self._counter())
        if lines is None:
            self.result.warnings.append(f"no /tokenize on {self.target.name}: the {target}-token prefix is an estimate")
        self.scenario = replace(self.scenario, prefix_text=text)

    async def _fit_synthetic(self) -> None:
        """Measure the filler's tokens per line with the target's /tokenize, so N tokens in is N by its count."""
        lines = 200
        got = await (await self._counter())(filler_text(0, self.scenario.name, lines=lines))
        if got is None:
            self.result.warnings.append(f"no /tokenize on {self.target.name}: synthetic input lengths are estimates")
            return
        self.scenario = replace(self.scenario, tokens_per_line=got / lines)

    async def _reply_lengths(self) -> None:
        """ShareGPT: each recorded reply's length, counted by the target, is its request's output length."""
        count = await self._counter()
        needed = len(self.scenario.prompts) if self.load.requests is None else min(len(self.scenario.prompts),
                                                                                  self.load.requests)  # fmt: skip
        prompts, estimated = list(self.scenario.prompts), 0
        for i, p in enumerate(prompts[:needed]):
            if p.reply and p.max_tokens is None:
                tokens = await count(p.reply)
                estimated += tokens is None
                prompts[i] = replace(p, max_tokens=max(1, tokens if tokens is not None else len(p.reply) // 4))
        if estimated:
            self.result.warnings.append(f"no /tokenize on {self.target.name}: {estimated} reply lengths are estimates")
        self.scenario = replace(self.scenario, prompts=tuple(prompts))

    async def _counter(self) -> Callable[[str], Awaitable[int | None]]:
        return token_counter(self.client.base, self.target.model, self.target.api_key)

    def _deadline(self, start_ns: int) -> int | None:
        return start_ns + int(self.load.duration_s * 1e9) if self.load.duration_s else None

    async def _closed_loop(self, concurrency: int, share: Share) -> None:
        take = share.take or counter(self.load.requests)  # shared by the streams: each takes the next index
        deadline = self._deadline(share.start_ns or time.perf_counter_ns())

        async def stream() -> None:
            while not self._should_stop(deadline) and (i := take()) is not None:
                await self._one(i, time.perf_counter_ns(), nonce=self._unique(i), label=self.scenario.name, keep=True)

        streams = stream_count(concurrency if share.streams is None else share.streams, self.load.requests)
        await asyncio.gather(*(stream() for _ in range(streams)))

    async def _open_loop(self, arrivals: OpenLoop, share: Share) -> None:
        """Requests at scheduled times regardless of completions; latency also counts from the schedule. Every
        process draws the same schedule and sends its own part of it."""
        rate, start = arrivals.rate, share.start_ns or time.perf_counter_ns()
        tasks: list[asyncio.Task[RequestRecord]] = []
        deadline, limit = self._deadline(start), math.ceil(self.load.max_in_flight / share.workers)
        schedule = zip(indices(self.load.requests), arrivals.offsets(), strict=False)
        for i, offset in itertools.islice(schedule, share.worker, None, share.workers):
            if self._should_stop(deadline):
                break
            in_flight = sum(not t.done() for t in tasks)
            if in_flight > limit:
                self.result.stopped_early = (
                    f"stopped early: {in_flight * share.workers} requests in flight at {rate:g} req/s, "
                    "the server is over-saturated"
                )
                break
            due = start + int(offset * 1e9)
            await asyncio.sleep(max(0.0, (due - time.perf_counter_ns()) / 1e9))
            tasks.append(
                asyncio.create_task(self._one(i, due, nonce=self._unique(i), label=self.scenario.name, keep=True))
            )
        await asyncio.gather(*tasks)

    async def _cold_then_warm(self) -> None:
        for i in indices(self.load.requests):
            nonce = self._unique(i)
            await self._one(2 * i, time.perf_counter_ns(), nonce=nonce, label=f"{self.scenario.name}:cold", keep=True)
            await self._one(
                2 * i + 1, time.perf_counter_ns(), nonce=nonce, label=f"{self.scenario.name}:warm", keep=True
            )

    def _should_stop(self, deadline: int | None) -> bool:
        if self._halted:
            return True
        if self._errors_in_row >= self.load.max_consecutive_errors:
            self.result.stopped_early = f"stopped early: {self._errors_in_row} errors in a row"
            return True
        return deadline is not None and time.perf_counter_ns() > deadline


def cache_warnings(records: Sequence[RequestRecord], load: Load, scenario: Scenario) -> list[str]:
    """What the step's records say of the prefix cache, of the output lengths the load asked for, and of greedy
    replies that cycle on one token (random weights: not real text's speed)."""
    out = []
    for r in records:
        if r.error:
            continue
        if r.labels.phase != "warm" and cache_reached_unique_part(r):
            out.append(f"{r.request_id}: {r.cached_tokens} prompt tokens came from the prefix cache on a cold request")
        if r.labels.phase == "warm" and r.cached_tokens is not None and r.cached_tokens == 0:
            out.append(f"{r.request_id}: the warm request found nothing in the prefix cache")
    if not load.unique_prefix and scenario.cache == "cold":
        out.append("requests were not made unique: the prefix cache may serve repeated prompts")
    if load.fixed_output != "off":
        short = [r for r in records if r.ok and r.finish_reason not in (None, "length")]
        if short:
            out.append(
                f"{len(short)} request(s) ended before max_tokens ({short[0].finish_reason}): the engine did not "
                "honour ignore_eos/min_tokens, output lengths vary"
            )
    cycling = cycling_replies(records, load.temperature)
    return [*out, cycling] if cycling else out


SHARED_HEAD_TOKENS = 32  # a chat template's fixed head (llama.cpp's slots reuse SmolLM2's default system turn)


def cache_reached_unique_part(record: RequestRecord) -> bool:
    """A cold request's cached tokens reach past what every prompt shares before its unique head: the
    template's fixed turn (a few tokens on llama.cpp, whose slots reuse any common prefix; none on vLLM, which
    caches whole 16-token blocks) is not a warm cache."""
    cached, prompt = record.cached_tokens or 0, record.prompt_tokens or 0
    return cached > max(SHARED_HEAD_TOKENS, prompt // 20)


def token_counter(api_base_url: str, model: str, api_key: str | None = None) -> Callable[[str], Awaitable[int | None]]:
    """Counts tokens with the server's own /tokenize; the count is None where the server has none."""

    async def count(text: str) -> int | None:
        api = AsyncEngineAPI(api_base_url, api_key=api_key, timeout=60)
        try:
            return await api.tokens(model, text)
        finally:
            await api.aclose()

    return count


async def fit_filler(target: int, seed: str, count: Callable[[str], Awaitable[int | None]]) -> tuple[str, int | None]:
    """Filler text of ``target`` tokens (within 0.5%) as ``count`` counts them; lines None when it cannot count."""
    lines = max(1, target // 10)
    for _ in range(4):
        text = filler_text(0, seed, lines=lines)
        got = await count(text)
        if got is None:
            return text, None
        if abs(got - target) <= max(8, target // 200):
            return text, lines
        lines = max(1, round(lines * target / got))
    return filler_text(0, seed, lines=lines), lines
