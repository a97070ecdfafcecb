"""One load process on a node of a Ray cluster: today's worker loop (:func:`servelab.load.workers.work`) on the
actor's own event loop, its messages kept until the coordinator collects them, and its clock read on request.

Imported by Ray on each node (servelab must be installed there); nothing here imports Ray."""

from __future__ import annotations

import asyncio
import importlib
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from servelab.load.workers import Job, work


def interleaved(first: int, every: int, requests: int | None) -> Callable[[], int | None]:
    """Request indices ``first``, ``first + every``, ... below ``requests`` (without end for None): the actors of a
    step take disjoint indices, and together every index once."""
    upcoming = first

    def take() -> int | None:
        nonlocal upcoming
        if requests is not None and upcoming >= requests:
            return None
        i, upcoming = upcoming, upcoming + every
        return i

    return take


def share_of(first: int, every: int, requests: int | None) -> int | None:
    """How many indices :func:`interleaved` hands out (None: without end)."""
    if requests is None:
        return None
    return max(0, -(-(requests - first) // every))


class LoadActor:
    """Made a Ray actor by the coordinator (``ray.remote(num_cpus=1)(LoadActor)``); async, so collecting its messages
    and reading its clock run on the same loop as its load, between its requests' reads."""

    def __init__(self) -> None:
        self.outbox: list[tuple[Any, ...]] = []
        self._start: asyncio.Future[int] | None = None

    def _started(self) -> asyncio.Future[int]:
        if self._start is None:
            self._start = asyncio.get_running_loop().create_future()
        return self._start

    async def where(self) -> dict[str, Any]:
        """The node this actor runs on, as Ray names it, and this process."""
        ray: Any = importlib.import_module("ray")  # on a node of the cluster, Ray is there

        context, util = ray.get_runtime_context(), ray.util
        return {"node_id": context.get_node_id(), "ip": util.get_node_ip_address(),
                "hostname": socket.gethostname(), "pid": os.getpid()}  # fmt: skip

    async def clock(self) -> int:
        return time.perf_counter_ns()

    async def run(self, job: Job, requests: int | None) -> None:
        """The worker loop over this actor's share: indices ``job.worker``, ``+ job.workers``, ... (a closed loop)."""
        take = interleaved(job.worker, job.workers, requests)
        started = self._started()

        async def start() -> int:
            return await started

        await work(job, self.outbox.append, take, start)

    async def go(self, start_ns: int) -> None:
        """Start at ``start_ns`` on this host's clock (the coordinator's start, mapped)."""
        if not self._started().done():
            self._started().set_result(start_ns)

    async def collect(self) -> list[tuple[Any, ...]]:
        """The messages since the last collect (the list is emptied in place: the worker loop appends to it)."""
        out = list(self.outbox)
        self.outbox.clear()
        return out
