"""The state of one process (the default): leases timed by ``time.monotonic`` (or an injected clock), charges in
a ledger. No coroutine here suspends, so a check and its charge are one step for the event loop."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from servelab.gateway.store.base import (
    FLAGS,
    Leases,
    Ledger,
    Limits,
    Settings,
    Snapshot,
    StoreState,
    check_lease,
    expiry,
    refused,
)


class MemoryStore:
    in_process = True

    def __init__(self, settings: Settings | None = None, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:  # fmt: skip
        self.settings, self.clock, self.wall = settings or Settings(), clock, wall
        self.flags = {name: Leases() for name in FLAGS}
        self.ledger = Ledger()
        self.owner = f"pid:{os.getpid()}"

    def _on(self, name: str, now: float) -> bool:
        return self.flags[name].on(now, self.settings.min_hold_s)

    async def snapshot(self) -> Snapshot:
        now = self.clock()
        return Snapshot(self._on("maintenance", now), self._on("realtime", now), self.ledger.total)

    async def admit(self, request: str, tokens: int, limits: Limits) -> bool:
        if refused(self._on("realtime", self.clock()), tokens, self.ledger.total, limits):
            return False
        self.ledger.add(request, tokens)
        return True

    async def release(self, request: str) -> None:
        self.ledger.pop(request)

    async def hold(self, flag: str, lease: str, ttl_s: float | None) -> None:
        check_lease(flag, lease)
        now = self.clock()
        self.flags[flag].hold(lease, self.owner, expiry(now, ttl_s), now, self.settings)

    async def drop(self, flag: str, lease: str) -> None:
        check_lease(flag, lease)
        self.flags[flag].held.pop(lease, None)

    async def state(self) -> StoreState:
        now, hold = self.clock(), self.settings.min_hold_s
        views = {name: leases.view(now, hold) for name, leases in self.flags.items()}
        return StoreState(views["maintenance"], views["realtime"], self.ledger.total, 1)

    async def close(self) -> None:
        return None
