"""One step's load from Ray actors spread over a cluster's nodes, stored here on this host's clock.

The coordinator (this process) fits the step and warms the target up as a one-host run does, then places W actors of
one CPU each with a placement group that spreads them over the nodes. Each runs today's worker loop: a closed loop's
streams are split between them and each takes every W-th request index (so a run of N requests sends N), an open
loop's arrivals are drawn by each from the one seeded schedule, every W-th to each. Before the start, a burst of
round trips maps each actor's monotonic clock onto this one (:mod:`.clock`); the start is sent to each in its own
clock, and every record that comes back (raw, every 0.1 s, never histograms) is moved onto this clock before it is
stored. Bursts during the run bound the drift. An actor (or its node) lost mid-run is named with the requests it
lost; the others' records are kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Any

from servelab.core.errors import ServelabError
from servelab.core.records import Labels
from servelab.core.results import ClientLoad
from servelab.load.arrivals import ClosedLoop, ColdThenWarm, OpenLoop, arrivals_for
from servelab.load.cluster.actor import LoadActor, share_of
from servelab.load.cluster.clock import BURST, EVERY_S, ClockMap, Exchange, best, mapped
from servelab.load.cluster.connect import INSTALL_HINT, connect
from servelab.load.runner import Load, ScenarioResult, ScenarioRun, Sink, Target, cache_warnings
from servelab.load.scenarios import Scenario
from servelab.load.workers import FLUSH_S, RATE_PER_WORKER, STREAMS_PER_WORKER, Job, split

PLACE_TIMEOUT_S = 300.0  # a busy small cluster starts an actor's process and imports servelab in seconds; allow minutes
START_LEAD_NS = 250_000_000  # the start is this far ahead of the go, plus the slowest round trip


@dataclass
class Actor:
    """One load actor as the coordinator sees it."""

    index: int
    handle: Any
    node: dict[str, Any] = field(default_factory=dict)
    clock: ClockMap | None = None
    share: int | None = None  # the requests it was to send (None: until the run's end)
    run: Any = None  # the ObjectRef of its run
    ready: bool = False
    ended: bool = False
    received: int = 0
    in_flight: int = 0  # at its last report
    client: ClientLoad | None = None
    died: str | None = None

    @property
    def name(self) -> str:
        return node_name(self.node)


def node_name(node: dict[str, Any]) -> str:
    """``node 3f2a9c1b at 10.0.0.5``: the node's id as Ray gives it (short) and its address."""
    if not node:
        return "an unknown node"
    return f"node {str(node.get('node_id', ''))[:8]} at {node.get('ip') or node.get('hostname')}"


def actor_count(load: Load, scenario: Scenario, nodes: int, cpus: int) -> int:
    """``load.workers`` actors, else one per node, or more where the load asks (one per 32 streams or 32 req/s); none
    without a stream or a request to send, and no more than the cluster's CPUs."""
    pattern = arrivals_for(load, scenario)
    wanted = load.workers or nodes
    if load.workers is None and isinstance(pattern, ClosedLoop):
        wanted = max(wanted, -(-pattern.concurrency // STREAMS_PER_WORKER))
    elif load.workers is None and isinstance(pattern, OpenLoop):
        wanted = max(wanted, int(-(-pattern.rate // RATE_PER_WORKER)))
    most = [wanted, max(1, cpus)]
    if isinstance(pattern, ClosedLoop):
        most.append(pattern.concurrency)
    if load.requests is not None:
        most.append(load.requests)
    return max(1, min(most))


async def run_on_ray(
    target: Target,
    scenario: Scenario,
    load: Load,
    sink: Sink,
    address: str,
    labels: Labels | None = None,
    ready: Callable[[], Awaitable[None]] | None = None,
) -> ScenarioResult:
    """The step from load actors on the Ray cluster at ``address``; fitted and warmed up here first (then ``ready``
    awaited). A cold-then-warm step (one prompt twice in a row) runs here alone."""
    ray = connect(address)
    lead = ScenarioRun(target, scenario, load, sink, labels, ready)
    if isinstance(arrivals_for(load, scenario), ColdThenWarm):
        alone = await lead.run()
        alone.warnings.append("a cold-then-warm step runs from this host alone (one prompt twice in a row)")
        return alone
    nodes, cpus = _cluster(ray)
    count = actor_count(load, scenario, nodes, cpus)
    group, actors = await _place(ray, count)
    try:
        await lead.prepare()
        fleet = Fleet(ray, actors, ScenarioResult(target.name, lead.scenario.name, warnings=list(lead.result.warnings)),
                      sink)  # fmt: skip
        await fleet.start(_jobs(target, lead.scenario, load, lead.labels, count), load.requests)
        await fleet.gather()
    finally:
        _release(ray, group, actors)
    result = fleet.result
    result.clients = [a.client or ClientLoad(worker=a.index, node=a.name, died=a.died) for a in actors]
    result.warnings += [f"load actor {a.index} on {a.name} died ({a.died})" for a in actors if a.died]
    result.warnings += cache_warnings(result.records, load, lead.scenario)
    result.hosts = [{"worker": a.index, "node": a.name, **(a.clock.to_dict() if a.clock else {})} for a in actors]
    return result


def _cluster(ray: ModuleType) -> tuple[int, int]:
    """Alive nodes with a CPU, and their CPUs (all of them: a placement group waits for those still held, as by the
    actors of a step just ended, whose release reaches the nodes a moment later)."""
    alive = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= 1]
    return len(alive), int(sum(n["Resources"]["CPU"] for n in alive))


def _jobs(target: Target, scenario: Scenario, load: Load, labels: Labels, count: int) -> list[Job]:
    pattern = arrivals_for(load, scenario)
    streams = split(pattern.concurrency, count) if isinstance(pattern, ClosedLoop) else [None] * count
    quiet = replace(load, warmup=0)
    return [Job(target, scenario, quiet, labels, k, count, streams[k]) for k in range(count)]


async def _place(ray: ModuleType, count: int) -> tuple[Any, list[Actor]]:
    """``count`` actors of one CPU each, spread over the nodes by a placement group; each says where it runs."""
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    group = placement_group([{"CPU": 1}] * count, strategy="SPREAD")
    try:
        await asyncio.wait_for(_value(group.ready()), PLACE_TIMEOUT_S)
    except TimeoutError:
        remove_placement_group(group)
        free = ray.available_resources().get("CPU", 0)
        raise ServelabError(
            f"the Ray cluster could not place {count} load actors of one CPU each in {PLACE_TIMEOUT_S:g} s "
            f"({free:g} CPUs free)",
            hint="give --workers fewer",
        ) from None
    remote = ray.remote(num_cpus=1, max_restarts=0)(LoadActor)
    actors = [Actor(k, remote.options(scheduling_strategy=PlacementGroupSchedulingStrategy(group, k)).remote())
              for k in range(count)]  # fmt: skip
    try:
        wheres = await asyncio.wait_for(asyncio.gather(*(_value(a.handle.where.remote()) for a in actors)),
                                        PLACE_TIMEOUT_S)  # fmt: skip
    except Exception as exc:
        _release(ray, group, actors)
        said = _said(exc)
        raise ServelabError(f"a load actor could not start on the Ray cluster: {said}", hint=INSTALL_HINT) from None
    for actor, where in zip(actors, wheres, strict=True):
        actor.node = where
    return group, actors


def _release(ray: ModuleType, group: Any, actors: Sequence[Actor]) -> None:
    from ray.util.placement_group import remove_placement_group

    for a in actors:
        with contextlib.suppress(Exception):
            ray.kill(a.handle)
    with contextlib.suppress(Exception):
        remove_placement_group(group)


async def _value(ref: Any) -> Any:
    return await ref


def _said(exc: BaseException) -> str:
    """What a Ray error says, in one line: its last line names the cause (a node that died, an import that failed)."""
    lines = [x.strip() for x in str(exc).splitlines() if x.strip()]
    cause = next((x for x in lines if "died because" in x or "Error:" in x), lines[-1] if lines else "")
    return cause or type(exc).__name__


async def burst(actor: Actor) -> Exchange:
    """``BURST`` round trips through the actor; the shortest kept."""
    out = []
    for _ in range(BURST):
        t0 = time.perf_counter_ns()
        remote = await actor.handle.clock.remote()
        out.append(Exchange(t0, remote, time.perf_counter_ns()))
    return best(out)


class Fleet:
    """The actors of one step: their clocks, the start, their messages merged on this host's clock."""

    def __init__(self, ray: ModuleType, actors: list[Actor], result: ScenarioResult, sink: Sink) -> None:
        self.ray, self.actors, self.result, self.sink = ray, actors, result, sink
        self.started = False
        self.next_burst = 0.0

    async def start(self, jobs: Sequence[Job], requests: int | None) -> None:
        """Each actor's clock mapped, then its run begun (it says it is ready, then waits for its start)."""
        for actor, job in zip(self.actors, jobs, strict=True):
            actor.clock = ClockMap(await burst(actor))
            actor.share = share_of(job.worker, job.workers, requests)
            actor.run = actor.handle.run.remote(job, requests)
        self.next_burst = time.monotonic() + EVERY_S

    async def gather(self) -> None:
        """Collect every actor's messages every ``FLUSH_S`` until each has ended or died; start them together once
        all are ready (or dead); a burst of round trips every ``EVERY_S``."""
        while not all(a.ended for a in self.actors):
            await asyncio.sleep(FLUSH_S)
            live = [a for a in self.actors if not a.ended]
            got = await asyncio.gather(*(_value(a.handle.collect.remote()) for a in live), return_exceptions=True)
            for actor, messages in zip(live, got, strict=True):
                if isinstance(messages, BaseException):
                    self._lost(actor, messages)
                    continue
                for message in messages:
                    self._take(actor, message)
            await self._run_errors()
            if not self.started and all(a.ready or a.ended for a in self.actors):
                await self._go()
            if time.monotonic() >= self.next_burst:
                await self._bursts()

    def _take(self, actor: Actor, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "ready":
            actor.ready = True
        elif kind == "records":
            _, records, actor.in_flight = message
            assert actor.clock is not None
            for record in records:
                record = mapped(record, actor.clock)
                self.result.records.append(record)
                self.sink(record)
            actor.received += len(records)
        elif kind == "done":
            _, client, warnings, stopped = message
            actor.client = client.model_copy(update={"worker": actor.index, "node": actor.name})
            actor.ended, actor.in_flight = True, 0
            self.result.warnings += [w for w in warnings if w not in self.result.warnings]
            self.result.stopped_early = self.result.stopped_early or stopped

    def _lost(self, actor: Actor, exc: BaseException) -> None:
        """An actor that no longer answers: named with what it lost (its in-flight requests at its last report, and
        its share it had not sent)."""
        actor.ended = True
        lost = f"{actor.in_flight} request(s) in flight at its last report were lost"
        if actor.share is not None:
            unsent = max(0, actor.share - actor.received - actor.in_flight)
            lost += f", {unsent} of its {actor.share} not sent"
        actor.died = f"{_said(exc)}; {lost}"

    async def _run_errors(self) -> None:
        """A run that raised (the worker loop failed on its host) ends its actor with what it said."""
        runs = [a for a in self.actors if not a.ended and a.run is not None]
        if not runs:
            return
        done, _ = self.ray.wait([a.run for a in runs], num_returns=len(runs), timeout=0)
        for actor in (a for a in runs if a.run in done):
            try:
                await _value(actor.run)
            except Exception as exc:
                self._lost(actor, exc)

    async def _go(self) -> None:
        """The start, ``START_LEAD_NS`` ahead on this clock, sent to each actor on its own."""
        self.started = True
        live = [a for a in self.actors if not a.ended and a.clock is not None]
        slowest = max((a.clock.start.t3 - a.clock.start.t0 for a in live if a.clock), default=0)
        start = time.perf_counter_ns() + START_LEAD_NS + 2 * slowest
        for a in live:
            assert a.clock is not None
            a.handle.go.remote(a.clock.to_host(start))

    async def _bursts(self) -> None:
        self.next_burst = time.monotonic() + EVERY_S
        for a in self.actors:
            if a.ended or a.clock is None:
                continue
            with contextlib.suppress(Exception):  # a lost actor is said by its next collect
                a.clock.later.append(await burst(a))
