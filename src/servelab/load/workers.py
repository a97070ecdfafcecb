"""One step's load from several processes on this host, each with its own event loop and connections.

The parent fits the step and warms the target up, then starts the workers (spawned: nothing inherited). A closed
loop's streams are split between them and every worker takes the next request index from one shared counter, so
a run of N requests sends N; an open loop's schedule is drawn by every worker from the same seed and each sends
every W-th arrival, due from one start on the host's monotonic clock (``perf_counter_ns``), so arrival times stay
exact. Each worker sends its raw records back as they finish (every 0.1 s), so the parent stores them on the one
clock and every percentile is computed from the records, never from merged histograms. A worker that dies loses
only the requests it had in flight; the step says which worker, how and how many.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import multiprocessing as mp
import os
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event
from typing import Any

from servelab.core.records import Labels, RequestRecord
from servelab.core.results import ClientLoad
from servelab.load.arrivals import ClosedLoop, ColdThenWarm, OpenLoop, arrivals_for
from servelab.load.runner import Load, ScenarioResult, ScenarioRun, Share, Sink, Target, cache_warnings
from servelab.load.scenarios import Scenario
from servelab.load.sessions.run import SessionRun, session_warnings

FLUSH_S = 0.1
START_LEAD_NS = 50_000_000  # the shared start is this far after the last worker said it was ready
# The default: a worker per this many streams (or requests a second), up to half the cores. On the H200 one worker
# streaming 15-17K tokens/s (64 streams of a 135M model) used 81-84% of a core with its loop behind in 11-13% of its
# ticks (runs of 2026-12-04): near saturation, its stamps late. A worker is given half that (32 streams, or 32
# requests of 256 tokens a second), so it keeps room on a fast server and slower servers leave it more.
STREAMS_PER_WORKER = 32
RATE_PER_WORKER = 32.0
_PIPE_BYTES = 1 << 20


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def default_workers(load: Load, scenario: Scenario) -> int:
    """One process up to 32 streams (or 32 req/s); one more per as many again, up to half this host's cores
    (the rest for the server when it shares the host, and for the parent storing the records)."""
    pattern = arrivals_for(load, scenario)
    if isinstance(pattern, ClosedLoop):
        wanted = -(-pattern.concurrency // STREAMS_PER_WORKER)
    elif isinstance(pattern, OpenLoop):
        wanted = int(-(-pattern.rate // RATE_PER_WORKER))
    else:
        return 1
    return max(1, min(wanted, usable_cores() // 2))


WHY_FEWER = "no more than the step's streams and requests, nor four per core"


def useful_workers(asked: int, pattern: object, requests: int | None) -> int:
    """``asked`` load processes, but none without a stream or a request to send, and at most four per core (a
    process more only shares a core and adds its start)."""
    most = [asked, 4 * usable_cores()]
    if isinstance(pattern, ClosedLoop):
        most.append(pattern.concurrency)
    if requests is not None:
        most.append(requests)
    return max(1, min(most))


def split(total: int, parts: int) -> list[int]:
    """``total`` streams over ``parts`` workers, as evenly as they go (the first ones one more)."""
    return [total // parts + (k < total % parts) for k in range(parts)]


@dataclass(frozen=True)
class Job:
    """What one worker is sent (pickled): the fitted step and its share."""

    target: Target
    scenario: Scenario
    load: Load
    labels: Labels
    worker: int
    workers: int
    streams: int | None


@dataclass
class _Worker:
    index: int
    process: Any  # multiprocessing's SpawnProcess
    conn: Connection
    ready: bool = False
    done: bool = False
    in_flight: int = 0  # at its last report
    client: ClientLoad | None = None


@dataclass
class _Merge:
    """What the parent gathers from every worker."""

    result: ScenarioResult
    sink: Sink
    workers: list[_Worker] = field(default_factory=list)

    def take(self, worker: _Worker, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "ready":
            worker.ready = True
        elif kind == "records":
            _, records, worker.in_flight = message
            for record in records:
                self.result.records.append(record)
                self.sink(record)
        elif kind == "done":
            _, worker.client, warnings, stopped = message
            worker.done, worker.in_flight = True, 0
            self.result.warnings += [w for w in warnings if w not in self.result.warnings]
            self.result.stopped_early = self.result.stopped_early or stopped


async def run_in_workers(
    target: Target,
    scenario: Scenario,
    load: Load,
    sink: Sink,
    labels: Labels | None = None,
    workers: int = 2,
    ready: Callable[[], Awaitable[None]] | None = None,
) -> ScenarioResult:
    """The step from ``workers`` processes; fitted and warmed up here first (then ``ready`` awaited). A
    cold-then-warm step (one prompt twice in a row) runs here alone."""
    sessions = scenario.sessions is not None
    lead: ScenarioRun | SessionRun = (
        SessionRun(target, scenario, load, sink)
        if sessions
        else ScenarioRun(target, scenario, load, sink, labels, ready)
    )
    requests = None if sessions else load.requests  # a session step's count is its sessions (the loop's streams)
    asked, workers = workers, useful_workers(workers, arrivals_for(load, scenario), requests)
    fewer = [f"{asked} load processes asked for, {workers} started: {WHY_FEWER}"] if workers < asked else []
    if workers <= 1 or isinstance(arrivals_for(load, scenario), ColdThenWarm):
        alone = await lead.run()
        alone.warnings += fewer
        return alone
    await lead.prepare()
    if sessions and ready is not None:
        await ready()
    job = replace(load, warmup=0)
    merge = _Merge(ScenarioResult(target.name, lead.scenario.name, warnings=[*lead.result.warnings, *fewer]), sink)
    ctx = mp.get_context("spawn")
    taken, start, go = ctx.Value("q", 0), ctx.Value("q", 0), ctx.Event()
    pattern = arrivals_for(load, lead.scenario)
    streams = split(pattern.concurrency, workers) if isinstance(pattern, ClosedLoop) else [None] * workers
    for k in range(workers):
        spec = Job(target, lead.scenario, job, lead.labels if isinstance(lead, ScenarioRun) else Labels(), k, workers,
                   streams[k])  # fmt: skip
        merge.workers.append(_spawn(ctx, spec, taken, start, go))
    try:
        await _gather(merge, start, go)
    finally:
        _stop(merge.workers)
    merge.result.clients = [_client_of(w) for w in merge.workers]
    merge.result.warnings += _deaths(merge.workers)
    merge.result.warnings += [] if sessions else cache_warnings(merge.result.records, load, lead.scenario)
    return merge.result


def _spawn(ctx: Any, job: Job, taken: Any, start: Any, go: Event) -> _Worker:
    receive, send = ctx.Pipe(duplex=False)
    with contextlib.suppress(OSError):  # a larger pipe: a worker never waits on the parent to read
        fcntl.fcntl(send.fileno(), getattr(fcntl, "F_SETPIPE_SZ", 1031), _PIPE_BYTES)
    process = ctx.Process(target=worker_main, args=(job, send, taken, start, go), daemon=True)
    process.start()
    send.close()
    return _Worker(job.worker, process, receive)


async def _gather(merge: _Merge, start: Any, go: Event) -> None:
    """Read every worker's messages as they come; start them together once all are ready; return when all ended."""
    loop = asyncio.get_running_loop()
    ended: asyncio.Queue[_Worker] = asyncio.Queue()

    def begin() -> None:
        start.value = time.perf_counter_ns() + START_LEAD_NS
        go.set()

    def readable(worker: _Worker) -> None:
        try:
            while worker.conn.poll():
                merge.take(worker, worker.conn.recv())
        except (EOFError, OSError):
            loop.remove_reader(worker.conn.fileno())
            ended.put_nowait(worker)
            if not go.is_set():  # one died before it was ready: the others must not wait for it
                begin()
            return
        if not go.is_set() and all(w.ready for w in merge.workers):
            begin()

    for worker in merge.workers:
        loop.add_reader(worker.conn.fileno(), readable, worker)
    try:
        for _ in merge.workers:
            await ended.get()
    finally:
        for worker in merge.workers:
            with contextlib.suppress(ValueError, OSError):
                loop.remove_reader(worker.conn.fileno())


def _stop(workers: list[_Worker]) -> None:
    for w in workers:
        if w.process.is_alive():
            w.process.terminate()
        w.process.join(timeout=5)
        w.conn.close()


def _client_of(worker: _Worker) -> ClientLoad:
    if worker.done and worker.client is not None:
        return worker.client
    return ClientLoad(worker=worker.index, died=_death(worker))


def _death(worker: _Worker) -> str:
    code = worker.process.exitcode
    how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit status {code}"
    return f"{how}; {worker.in_flight} request(s) in flight at its last report were lost"


def _deaths(workers: list[_Worker]) -> list[str]:
    return [f"load worker {w.index} died ({_death(w)})" for w in workers if not w.done]


def worker_main(job: Job, conn: Connection, taken: Any, start: Any, go: Event) -> None:
    """A worker process: its share of the step on its own event loop; records to the parent as they finish."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the workers; a Ctrl-C reaches it alone
    asyncio.run(_work(job, conn, taken, start, go))


def _take(taken: Any, requests: int | None) -> int | None:
    with taken.get_lock():
        i = int(taken.value)
        if requests is not None and i >= requests:
            return None
        taken.value = i + 1
    return i


async def _work(job: Job, conn: Connection, taken: Any, start: Any, go: Event) -> None:
    async def started() -> int:
        await asyncio.to_thread(go.wait)
        return int(start.value)

    try:
        await work(job, conn.send, lambda: _take(taken, job.load.requests), started)
    finally:
        conn.close()


Send = Callable[[tuple[Any, ...]], None]


async def work(job: Job, send: Send, take: Callable[[], int | None], started: Callable[[], Awaitable[int]]) -> None:
    """The worker loop, wherever it runs (a process here, a Ray actor on another host): ready, then its share of the
    step from the start ``started`` gives (on this host's monotonic clock), its records sent as they finish (every
    ``FLUSH_S``, with its in-flight count), then its client load: ``ready``, ``records``..., ``done``."""
    if job.scenario.sessions is not None:
        await work_sessions(job, send, started)
        return
    batch: list[RequestRecord] = []
    run = ScenarioRun(job.target, job.scenario, job.load, batch.append, job.labels)
    run.monitor.worker = job.worker
    send(("ready",))
    share = Share(job.worker, job.workers, job.streams, take, await started())
    await _driven(send, batch, run, share, lambda: run.result.warnings)


def _send_batch(send: Send, batch: list[RequestRecord], in_flight: int) -> None:
    send(("records", list(batch), in_flight))
    batch.clear()


async def work_sessions(job: Job, send: Send, started: Callable[[], Awaitable[int]]) -> None:
    """A session step's worker: the spec fitted as the lead fitted it (the same count of the same filler, so the
    same lengths), then its sessions (every ``workers``-th) from the shared start; the same messages as
    :func:`work`."""
    batch: list[RequestRecord] = []
    run = SessionRun(job.target, job.scenario, job.load, batch.append)
    run.monitor.worker = job.worker
    await run.prepare()  # the job's load has no warm-up: the lead's warmed the server
    send(("ready",))
    share = Share(job.worker, job.workers, None, None, await started())
    await _driven(send, batch, run, share, lambda: run.result.warnings + session_warnings(
        run.result.records, job.load, run.compactions, run.unfit))  # fmt: skip


async def _driven(send: Send, batch: list[RequestRecord], run: ScenarioRun | SessionRun, share: Share,
                  warnings: Callable[[], list[str]]) -> None:  # fmt: skip
    """From the shared start: the run's share driven, its records sent as they finish, then its client load."""
    await asyncio.sleep(max(0.0, ((share.start_ns or 0) - time.perf_counter_ns()) / 1e9))  # all start together
    flusher = asyncio.create_task(_flush(send, batch, run))
    run.monitor.start()
    try:
        await run.drive(share)
    finally:
        flusher.cancel()
        client = await run.monitor.stop()
        _send_batch(send, batch, 0)
        send(("done", client, warnings(), run.result.stopped_early))


async def _flush(send: Send, batch: list[RequestRecord], run: ScenarioRun | SessionRun) -> None:
    while True:
        await asyncio.sleep(FLUSH_S)
        _send_batch(send, batch, run.monitor.in_flight)
