"""The state shared by gateway replicas on several hosts, in Redis: every read and write one Lua script
(:mod:`.lua`), so a budget check and its charge are one step on Redis, and every time is Redis ``TIME``.

Charges are owned per replica and per request: each replica keeps its own ledger (request id -> tokens) and, in
the background, writes it back to Redis and renews its ownership (``charge_ttl_s``); a replica that stops
renewing (killed with -9, cut off) stops counting when that runs out, and totals add up live replicas only.
The write-back makes Redis say what the ledger says, so a flushed or restarted Redis, or a replica coming back
after an outage, counts every charge once.

A fault never reaches a request: each call waits at most ``timeout_s``; the first fault opens the breaker, and
Redis is left alone (a background probe every ``retry_s`` brings it back). While it is open the replica decides
from its own state, conservatively: realtime is assumed on (a lease it knew may be renewed, and a new one
taken, through a replica that still reaches Redis: neither can be ruled out), maintenance as last seen, and
its own charges against its share of the budget (the budget over the replicas last seen alive). Lease calls
then raise :class:`StoreUnavailable`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import secrets
import socket
import time
from collections.abc import Callable
from typing import Any, TypeVar

from servelab.gateway.store import lua
from servelab.gateway.store.base import (
    FlagView,
    LeaseView,
    Ledger,
    Limits,
    Settings,
    Snapshot,
    StoreState,
    StoreUnavailable,
    TooManyLeases,
    check_lease,
    expiry,
    refused,
)

log = logging.getLogger("servelab.gateway.store")
T = TypeVar("T")


class Degraded(Exception):
    """Redis is not used now (the breaker is open): the caller decides from local state."""


class RedisStore:
    in_process = False

    def __init__(
        self,
        url: str,
        prefix: str,
        settings: Settings | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        import redis.asyncio as redis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        self.settings, self.clock, self.wall = settings or Settings(), clock, wall
        timeout = self.settings.timeout_s
        self.redis = redis.from_url(url, decode_responses=True, socket_timeout=timeout,
                                    socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0))  # fmt: skip
        self.scripts = {name: self.redis.register_script(getattr(lua, name))
                        for name in ("SNAPSHOT", "ADMIT", "RELEASE", "HOLD", "DROP", "STATE", "RENEW")}  # fmt: skip
        self.prefix, self.me = prefix, f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.ledger, self.epoch = Ledger(), ""
        self.fault: str | None = None  # why the breaker is open (None: closed)
        self.retry_at, self.trips, self.misses = 0.0, 0, 0  # misses: probes that raced a change of the ledger
        self.seen = Snapshot(False, False, 0)  # the last answer, for the degraded policy
        self.owners = 1
        self._keeper: asyncio.Task[None] | None = None
        self.closed = False
        self.written_upto = 0  # the ledger's seq in the last write-back sent

    # ---- the breaker ----------------------------------------------------------------------------------------
    async def _run(self, name: str, parse: Callable[[list[Any]], T], *args: str | int) -> T:
        """One script, at most ``timeout_s``, its answer parsed; any fault (refused, timed out, an error or
        garbage answered) opens the breaker and is :class:`Degraded` here."""
        self._keep()
        if self.fault is not None:
            raise Degraded(self.fault)
        try:
            return parse(await self._call(name, *args))
        except Exception as exc:
            self._trip(exc)
            raise Degraded(self.fault) from exc

    async def _call(self, name: str, *args: str | int) -> list[Any]:
        head: tuple[str | int, ...] = (
            self.prefix,
            self.epoch,
            _ms(self.settings.min_hold_s),
            _ms(self.settings.recovery_s),
            self.me,
        )
        if name == "RELEASE":
            head = (self.prefix, self.me, _ms(self.settings.charge_ttl_s))
        async with asyncio.timeout(self.settings.timeout_s):
            got = await self.scripts[name](args=[*head, *args])
        if name == "RELEASE":
            return []
        if not isinstance(got, list) or not got or not isinstance(got[-1], str):
            raise ValueError(f"Redis answered {str(got)[:80]!r} to {name}")
        self.epoch = got[-1]
        return got

    def _trip(self, exc: BaseException) -> None:
        if self.fault is None:
            log.warning("the gateway's Redis state is unavailable (%s): deciding from local state", exc)
        self.fault = f"redis: {type(exc).__name__}: {str(exc)[:200]}"
        self.trips += 1
        self.retry_at = self.clock() + self.settings.retry_s

    def _keep(self) -> None:
        """The background task (started with the first call, on its loop) that renews and probes."""
        if self._keeper is None and not self.closed:
            self._keeper = asyncio.get_running_loop().create_task(self._renewing())

    async def _renewing(self) -> None:
        every = self.settings.charge_ttl_s / 4
        while not self.closed:
            if await self.renew():
                continue  # the ledger changed while it was written back: again, at once
            await asyncio.sleep(max(0.0, self.retry_at - self.clock()) if self.fault else every)

    async def renew(self) -> bool:
        """Write the ledger back to Redis and renew this replica's charges; with the breaker open, the probe
        that closes it. It closes only on a write-back of the ledger as it is now, started after the last fault
        (an answer to a call sent before Redis froze says nothing of the charges taken since): nothing counted
        twice, nothing lost. True: the ledger changed meanwhile (written back again at once)."""
        upto, changes, trips = self.ledger.seq, self.ledger.changes, self.trips
        flat = [str(x) for rid, (n, seq) in self.ledger.charges.items() for x in (rid, n, seq)]
        self.written_upto = upto
        try:
            self._seen(await self._call("RENEW", _ms(self.settings.charge_ttl_s), upto, *flat))
        except Exception as exc:  # a failed probe keeps the breaker open
            self._trip(exc)
            return False
        changed = changes != self.ledger.changes
        if self.fault is None or trips != self.trips:
            return False  # up: a change meanwhile is the next write-back's
        if changed and self.misses < 3:
            self.misses += 1
            return True
        log.warning("the gateway's Redis state is back")
        self.fault, self.misses = None, 0
        return changed

    def _seen(self, got: list[Any]) -> Snapshot:
        """The replicas alive: as Redis says, but never fewer than known while the state is being recovered (the
        others have not all written back yet)."""
        maintenance, realtime, total, owners, recovering = (int(x) for x in got[:5])
        self.owners = max(1, owners, self.owners if recovering else 1)
        self.seen = Snapshot(bool(maintenance), bool(realtime), total)
        return self.seen

    def _unavailable(self) -> StoreUnavailable:
        return StoreUnavailable(self.fault or "redis", max(1.0, self.retry_at - self.clock()))

    # ---- the store ------------------------------------------------------------------------------------------
    async def snapshot(self) -> Snapshot:
        try:
            return await self._run("SNAPSHOT", self._seen)
        except Degraded:
            reserve = self.settings.budget - self.settings.budget // self.owners  # the others' shares
            return Snapshot(self.seen.maintenance, True, self.ledger.total + reserve, self.fault)

    async def admit(self, request: str, tokens: int, limits: Limits) -> bool:
        """The charge is in the ledger before the script is sent and out of it if the script refuses or is
        cut off (a charge it made anyway is dropped by the next write-back)."""
        refused(False, tokens, 0, limits)  # a charge that is no count of tokens: refused before anything
        seq = self.ledger.add(request, tokens)
        try:
            if await self._run("ADMIT", _first, request, tokens, seq, limits.threshold, limits.budget,
                               _ms(self.settings.charge_ttl_s), limits.budget // self.owners) == 1:  # fmt: skip
                return True
        except Degraded:
            share = limits.budget // self.owners
            if not refused(True, tokens, self.ledger.total - tokens, Limits(limits.threshold, share)):
                return True
        except BaseException:
            self.ledger.pop(request)  # a charge the script made anyway: dropped by the next write-back
            raise
        self.ledger.pop(request)
        if seq <= self.written_upto:  # a write-back sent since may carry it: given back behind it
            with contextlib.suppress(Degraded):
                await self._run("RELEASE", _first_or_none, request, seq)
        return False

    async def release(self, request: str) -> None:
        """Out of the ledger, then out of Redis (with the breaker open: by the write-back that closes it)."""
        found = self.ledger.take(request)
        if found is None:
            return
        with contextlib.suppress(Degraded):
            await self._run("RELEASE", _first_or_none, request, found[1])

    async def hold(self, flag: str, lease: str, ttl_s: float | None) -> None:
        check_lease(flag, lease)
        until = expiry(0.0, ttl_s)
        ttl = "inf" if until == math.inf else str(max(1, _ms(until)))
        try:
            got = await self._run("HOLD", _first, flag, lease, ttl, self.settings.max_leases)
        except Degraded:
            raise self._unavailable() from None
        if got == -1:
            raise TooManyLeases(f"{self.settings.max_leases} leases are held already")

    async def drop(self, flag: str, lease: str) -> None:
        check_lease(flag, lease)
        try:
            await self._run("DROP", _first, flag, lease)
        except Degraded:
            raise self._unavailable() from None

    async def state(self) -> StoreState:
        try:
            return await self._run("STATE", _state)
        except Degraded:
            seen = self.seen
            return StoreState(FlagView(seen.maintenance, None), FlagView(True, None), self.ledger.total,
                              self.owners, self.fault)  # fmt: skip

    async def close(self) -> None:
        """Stop the background task (a cancellation a timeout swallowed is sent again) and the connections."""
        self.closed = True
        while self._keeper is not None and not self._keeper.done():
            self._keeper.cancel()
            await asyncio.wait({self._keeper}, timeout=self.settings.timeout_s)
        with contextlib.suppress(Exception):
            await self.redis.aclose()


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


def _first(got: list[Any]) -> int:
    return int(got[0])


def _first_or_none(got: list[Any]) -> None:
    return None


def _state(got: list[Any]) -> StoreState:
    return StoreState(_flag(got[2]), _flag(got[3]), int(got[1]), int(got[0]))


def _flag(raw: list[Any]) -> FlagView:
    on, held, leases = raw
    views = tuple(LeaseView(str(i), str(o), None if int(left) < 0 else int(left) / 1000) for i, o, left in leases)
    return FlagView(bool(int(on)), None if int(held) < 0 else int(held) / 1000, views)
