"""Trace replay: a Mooncake-format trace (one JSON line per request: ``timestamp`` in ms, ``input_length``,
``output_length``, ``hash_ids``) sent open loop at its own times (scaled), each prompt built from synthetic text
blocks, one per hash id, so requests that share a hash id share that prefix block's text and the engine's prefix
cache sees the trace's sharing. A block's text is seeded by the run and its hash id (the same id, the same text,
within a run; nothing shared with an earlier run)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from servelab.core.errors import UsageError
from servelab.core.records import Labels, RequestRecord
from servelab.engines.client import ClientOptions, StreamClient
from servelab.load.monitor import ClientMonitor
from servelab.load.runner import Load, ScenarioResult, Sink, Target, payload, room, token_counter
from servelab.load.scenarios import Scenario, filler_text

MOONCAKE_BLOCK = 512  # tokens per hash id in Mooncake's published traces
GUESS_TOKENS_PER_LINE = 12.0
_REQUIRED = ("timestamp", "input_length", "output_length", "hash_ids")


@dataclass(frozen=True, slots=True)
class TraceRequest:
    at_s: float  # after the trace's first request
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Trace:
    name: str
    requests: tuple[TraceRequest, ...]
    block_tokens: int = MOONCAKE_BLOCK
    speed: float = 1.0  # 2: twice as fast as recorded


def read_trace(path: Path, block_tokens: int = MOONCAKE_BLOCK) -> Trace:
    """Every line of a Mooncake-format trace; a line that is not a request is refused with its number."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc}") from exc
    requests = [_request(path, n, line) for n, line in enumerate(lines, start=1) if line.strip()]
    if not requests:
        raise UsageError(f"no requests in {path}", hint=f"each line a JSON object with {', '.join(_REQUIRED)}")
    t0 = min(r.at_s for r in requests)
    ordered = sorted((replace(r, at_s=r.at_s - t0) for r in requests), key=lambda r: r.at_s)
    return Trace(path.stem, tuple(ordered), block_tokens)


def _request(path: Path, number: int, line: str) -> TraceRequest:
    where = f"{path}:line {number}"
    try:
        raw = json.loads(line)
    except ValueError as exc:
        raise UsageError(f"{where}: not JSON ({exc})") from None
    if not isinstance(raw, dict) or (missing := [k for k in _REQUIRED if k not in raw]):
        lacks = f" (no {', '.join(missing)})" if isinstance(raw, dict) else ""
        raise UsageError(f"{where}: a trace request needs {', '.join(_REQUIRED)}{lacks}", hint="the Mooncake format")
    ids = raw["hash_ids"]
    counts = (raw["input_length"], raw["output_length"])
    if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in counts):
        raise UsageError(f"{where}: input_length and output_length are whole numbers of at least 1")
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise UsageError(f"{where}: hash_ids is a list of whole numbers")
    if not isinstance(raw["timestamp"], int | float) or isinstance(raw["timestamp"], bool):
        raise UsageError(f"{where}: timestamp is a number (milliseconds)")
    return TraceRequest(raw["timestamp"] / 1000, counts[0], counts[1], tuple(ids))


def trace_scenario(path: Path, speed: float = 1.0) -> Scenario:
    """The trace as an open-loop scenario (its ``rate`` the trace's mean, as scaled; the times are the trace's)."""
    trace = replace(read_trace(path), speed=speed)
    longest = max(r.output_tokens for r in trace.requests)
    span = trace.requests[-1].at_s / speed
    rate = len(trace.requests) / span if span > 0 else float(len(trace.requests))
    return Scenario(name=trace.name, description=f"trace replay of {path}", max_tokens=longest, rate=rate, trace=trace)


def overlap_blocks(requests: tuple[TraceRequest, ...], index: int) -> int:
    """The leading hash ids request ``index`` shares with any earlier request (a prefix cache can serve them)."""
    mine, best = requests[index].hash_ids, 0
    for earlier in requests[:index]:
        same = 0
        for a, b in zip(mine, earlier.hash_ids, strict=False):
            if a != b:
                break
            same += 1
        best = max(best, same)
    return best


@dataclass(frozen=True, slots=True)
class Blocks:
    """Each hash id's text: ``block_tokens`` tokens of filler by the target's count, seeded by the run."""

    run: str
    block_tokens: int
    tokens_per_line: float = GUESS_TOKENS_PER_LINE

    def lines(self, tokens: int) -> int:
        return max(1, round(tokens / self.tokens_per_line))

    def prompt(self, request: TraceRequest) -> str:
        """The request's text: a block per hash id (the last cut to its input length), a unique tail where the trace
        gives fewer ids than the length needs."""
        parts, left = [], request.input_tokens
        for hash_id in request.hash_ids:
            if left <= 0:
                break
            parts.append(filler_text(0, f"{self.run}:{hash_id}", lines=self.lines(min(left, self.block_tokens))))
            left -= self.block_tokens
        if left > 0:
            parts.append(filler_text(0, f"{self.run}:tail:{uuid.uuid4().hex}", lines=self.lines(left)))
        return "\n".join(parts)


def _fits(target: Target, request: TraceRequest) -> bool:
    limit = room(target, request.output_tokens)
    return limit is None or request.input_tokens <= limit


class TraceRun:
    """A trace replayed on one target, every request at its (scaled) time, recorded through ``sink``."""

    def __init__(self, target: Target, scenario: Scenario, load: Load, sink: Sink) -> None:
        assert scenario.trace is not None
        self.target, self.scenario, self.load, self.sink = target, scenario, load, sink
        self.trace: Trace = scenario.trace
        self.client = StreamClient(target.url, target=target.name, options=ClientOptions(api_key=target.api_key))
        self.result = ScenarioResult(target.name, scenario.name)
        self.monitor = ClientMonitor()
        run = uuid.uuid4().hex[:12] if load.unique_prefix else "trace"
        self.blocks = Blocks(run, self.trace.block_tokens)

    async def run(self) -> ScenarioResult:
        count = token_counter(self.client.base, self.target.model, self.target.api_key)
        lines = self.blocks.lines(self.blocks.block_tokens)  # a block's worth: short lines' numbers count fewer tokens
        got = await count(filler_text(0, "trace", lines=lines))
        if got is None:
            self.result.warnings.append(f"no /tokenize on {self.target.name}: block lengths are estimates")
        else:
            self.blocks = replace(self.blocks, tokens_per_line=got / lines)
        requests = self._fitting()
        self.monitor.start()
        try:
            await self._replay(requests)
        finally:
            self.result.clients = [await self.monitor.stop()]
        return self.result

    def _fitting(self) -> list[tuple[int, TraceRequest]]:
        """The trace's requests that fit the target's context; the others left out, said in a warning."""
        fit = [(i, r) for i, r in enumerate(self.trace.requests) if _fits(self.target, r)]
        if not fit:
            raise UsageError(f"no request of {self.trace.name} fits {self.target.name}'s context")
        if len(fit) < len(self.trace.requests):
            self.result.warnings.append(f"{len(self.trace.requests) - len(fit)} trace request(s) longer than "
                                        f"{self.target.name}'s context were not sent")  # fmt: skip
        return fit

    async def _replay(self, requests: list[tuple[int, TraceRequest]]) -> None:
        start, tasks = time.perf_counter_ns(), []
        deadline = None if self.load.duration_s is None else start + int(self.load.duration_s * 1e9)
        for index, request in requests:
            due = start + int(request.at_s / self.trace.speed * 1e9)
            if deadline is not None and due > deadline:
                break
            await asyncio.sleep(max(0.0, (due - time.perf_counter_ns()) / 1e9))
            tasks.append(asyncio.create_task(self._one(index, request, due)))
        await asyncio.gather(*tasks)

    async def _one(self, index: int, request: TraceRequest, due: int) -> None:
        messages: list[dict[str, Any]] = [{"role": "user", "content": self.blocks.prompt(request)}]
        body = payload(self.target, self.scenario, [], replace(self.load, max_tokens=request.output_tokens))
        body["messages"] = messages
        labels = Labels(step=self.scenario.name, item=str(index))  # the trace line's index, for its overlap
        record: RequestRecord = self.client.new_record("chat", scenario=self.scenario.name, labels=labels)
        self.monitor.sent()
        try:
            await self.client.send("chat", body, record=record, scheduled_ns=due)
        finally:
            self.monitor.done()
        self.result.records.append(record)
        self.sink(record)
