"""How hard the load generator itself worked during a step: its CPU, its event loop's lag and how late it read the
bytes the kernel had received. A client near a full core, or whose loop runs late, measures itself."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from servelab.core.results import ClientLoad
from servelab.core.stats import percentiles
from servelab.engines.lateness import READ_LATENESS

TICK_S = 0.010  # the lag probe's period
LATE_TICK_MS = 5.0  # a tick this late means the loop could not run when it wanted (busy, or not given the CPU)


def _ms(values_ns: Sequence[int]) -> dict[str, float]:
    if not values_ns:
        return {}
    got = percentiles([v / 1e6 for v in values_ns])
    return {"p50": got["p50"], "p99": got["p99"], "max": max(values_ns) / 1e6}


class ClientMonitor:
    """Started on the loop that sends the load; ``stop()`` gives the step's :class:`ClientLoad`."""

    def __init__(self, worker: int = 0) -> None:
        self.worker = worker
        self.lags_ns: list[int] = []
        self.in_flight = self.in_flight_max = self.finished = 0
        self._task: asyncio.Task[None] | None = None
        self._wall0 = self._cpu0 = 0.0
        self._late_mark = 0

    def start(self) -> None:
        self._wall0, self._cpu0, self._late_mark = time.perf_counter(), time.process_time(), READ_LATENESS.count
        self._task = asyncio.create_task(self._probe())

    def sent(self) -> None:
        self.in_flight += 1
        self.in_flight_max = max(self.in_flight_max, self.in_flight)

    def done(self) -> None:
        self.in_flight -= 1
        self.finished += 1

    async def _probe(self) -> None:
        while True:
            due = time.perf_counter_ns() + int(TICK_S * 1e9)
            await asyncio.sleep(TICK_S)
            self.lags_ns.append(max(0, time.perf_counter_ns() - due))

    async def stop(self) -> ClientLoad:
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait([self._task])
        return self.snapshot()

    def snapshot(self) -> ClientLoad:
        wall, cpu = time.perf_counter() - self._wall0, time.process_time() - self._cpu0
        return ClientLoad(
            worker=self.worker,
            wall_s=wall,
            cpu_s=cpu,
            cpu_share=cpu / wall if wall > 0 else 0.0,
            loop_lag_ms=_ms(self.lags_ns),
            loop_late_share=sum(lag >= LATE_TICK_MS * 1e6 for lag in self.lags_ns) / len(self.lags_ns)
            if self.lags_ns
            else 0.0,
            read_late_ms=_ms(READ_LATENESS.since(self._late_mark)),
            requests=self.finished,
            in_flight_max=self.in_flight_max,
        )
