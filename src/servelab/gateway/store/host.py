"""The state of the worker processes of one host, in a small memory-mapped file (under /dev/shm by default) that
every worker maps: no Redis needed on one machine. Leases are timed by ``time.monotonic`` (or an injected clock),
one clock for every process of the host.

Every read-modify-write (a lease taken, an admission) is under an exclusive ``flock`` held for microseconds,
so two workers never both pass a check only one fits. The prefill in flight is one counter per process (a slot
that only its own process writes, summed by readers), and a slot counts only while its process is alive: a
worker killed with -9 stops counting at once, and its slot is taken over by the next store that opens.
:func:`reset_host_store` (the parent, before the workers start) clears the file."""

from __future__ import annotations

import fcntl
import math
import mmap
import os
import struct
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

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

if TYPE_CHECKING:
    from servelab.gateway.config import GatewayConfig

T = TypeVar("T")
PAGE = mmap.PAGESIZE
FLAG = struct.Struct("<dd")  # since (0: never), until: the latest expiry of its leases (0: none held)
SLOTS = 255  # page 1: how many slots were ever taken, their owners' pids, their tokens (8 bytes each)
COUNT = PAGE
PIDS = COUNT + 8
TOKENS = PIDS + 8 * SLOTS
BLOB = 32 * 1024  # from page 2, per flag: its leases as JSON (length first)
BLOBS = 2 * PAGE
SIZE = BLOBS + BLOB * len(FLAGS)
ONE = struct.Struct("<q")
LENGTH = struct.Struct("<I")


class HostStore:
    in_process = True  # its coroutines never suspend (flock is held for microseconds)
    SIZE = SIZE

    def __init__(self, path: str, settings: Settings | None = None, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:  # fmt: skip
        self.settings, self.clock, self.wall = settings or Settings(), clock, wall
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        if os.fstat(self.fd).st_size < SIZE:
            os.ftruncate(self.fd, SIZE)
        self.map = mmap.mmap(self.fd, SIZE)
        self.ledger, self.pid = Ledger(), os.getpid()
        self.slot = self._locked(self._claim)

    # ---- the file -------------------------------------------------------------------------------------------
    def _locked(self, work: Callable[[], T]) -> T:
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        try:
            return work()
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)

    def _used(self) -> int:
        """How many slots were ever taken (bounded: a state file left by something else reads as sane)."""
        count: int = ONE.unpack_from(self.map, COUNT)[0]
        return min(max(count, 0), SLOTS)

    def _claim(self) -> int:
        """A slot of this store's own: a free one, one whose process is gone, or a new one."""
        used = self._used()
        pids = struct.unpack_from(f"<{used}q", self.map, PIDS)
        slot = next((i for i, pid in enumerate(pids) if pid <= 0 or not _alive(pid)), used)
        if slot >= SLOTS:
            raise RuntimeError(f"more than {SLOTS} gateway processes share the state file")
        ONE.pack_into(self.map, PIDS + 8 * slot, self.pid)
        ONE.pack_into(self.map, TOKENS + 8 * slot, 0)
        ONE.pack_into(self.map, COUNT, max(used, slot + 1))
        return slot

    def _live_slots(self) -> list[tuple[int, int]]:
        """(pid, tokens) of every slot whose process is alive (a dead one's charges count no more)."""
        used = self._used()
        pids = struct.unpack_from(f"<{used}q", self.map, PIDS)
        tokens = struct.unpack_from(f"<{used}q", self.map, TOKENS)
        return [(p, t) for p, t in zip(pids, tokens, strict=True) if p > 0 and (p == self.pid or _alive(p))]

    def _total(self) -> int:
        return sum(max(t, 0) for p, t in self._live_slots() if t)

    def _on(self, name: str, now: float) -> bool:
        since, until = FLAG.unpack_from(self.map, FLAGS.index(name) * FLAG.size)
        return bool((until != 0.0 and now < until) or (since != 0.0 and now < since + self.settings.min_hold_s))

    def _load(self, name: str) -> Leases:
        since, _ = FLAG.unpack_from(self.map, FLAGS.index(name) * FLAG.size)
        at = BLOBS + BLOB * FLAGS.index(name)
        (length,) = LENGTH.unpack_from(self.map, at)
        held: dict[str, tuple[str, float]] = {}
        if 0 < length <= BLOB - LENGTH.size:
            try:
                raw: Any = orjson.loads(self.map[at + LENGTH.size : at + LENGTH.size + length])
                held = {str(k): (str(v[0]), math.inf if v[1] is None else float(v[1])) for k, v in raw.items()}
            except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError, IndexError, KeyError):
                held = {}  # a file someone else wrote: no leases
        return Leases(held, since if since else -math.inf)

    def _save(self, name: str, leases: Leases) -> None:
        at = BLOBS + BLOB * FLAGS.index(name)
        blob = orjson.dumps({k: [o, None if u == math.inf else u] for k, (o, u) in leases.held.items()})
        if len(blob) > BLOB - LENGTH.size:
            raise ValueError("the leases do not fit the state file: fewer leases or shorter ids")
        LENGTH.pack_into(self.map, at, len(blob))
        self.map[at + LENGTH.size : at + LENGTH.size + len(blob)] = blob
        until = max((u for _, u in leases.held.values()), default=0.0)
        since = 0.0 if leases.since == -math.inf else leases.since
        FLAG.pack_into(self.map, FLAGS.index(name) * FLAG.size, since, until)

    def _add(self, tokens: int) -> None:
        at = TOKENS + 8 * self.slot  # this store's own slot: no other process writes it
        ONE.pack_into(self.map, at, ONE.unpack_from(self.map, at)[0] + tokens)

    # ---- the store ------------------------------------------------------------------------------------------
    async def snapshot(self) -> Snapshot:
        def read() -> Snapshot:
            now = self.clock()
            return Snapshot(self._on("maintenance", now), self._on("realtime", now), self._total())

        return self._locked(read)

    async def admit(self, request: str, tokens: int, limits: Limits) -> bool:
        def check_and_charge() -> bool:
            if refused(self._on("realtime", self.clock()), tokens, self._total(), limits):
                return False
            self.ledger.add(request, tokens)
            self._add(tokens)
            return True

        return self._locked(check_and_charge)

    async def release(self, request: str) -> None:
        tokens = self.ledger.pop(request)
        if tokens is not None:
            self._add(-tokens)  # lowering one's own counter needs no lock

    async def hold(self, flag: str, lease: str, ttl_s: float | None) -> None:
        check_lease(flag, lease)

        def take() -> None:
            now, leases = self.clock(), self._load(flag)
            leases.expire(now)
            leases.hold(lease, f"pid:{self.pid}", expiry(now, ttl_s), now, self.settings)
            self._save(flag, leases)

        self._locked(take)

    async def drop(self, flag: str, lease: str) -> None:
        check_lease(flag, lease)

        def end() -> None:
            leases = self._load(flag)
            leases.held.pop(lease, None)
            leases.expire(self.clock())
            self._save(flag, leases)

        self._locked(end)

    async def state(self) -> StoreState:
        def read() -> StoreState:
            now, hold = self.clock(), self.settings.min_hold_s
            views = {name: self._load(name).view(now, hold) for name in FLAGS}
            live = self._live_slots()
            return StoreState(views["maintenance"], views["realtime"], self._total(), sum(1 for _, t in live if t))

        return self._locked(read)

    async def close(self) -> None:
        def release() -> None:
            ONE.pack_into(self.map, PIDS + 8 * self.slot, 0)
            ONE.pack_into(self.map, TOKENS + 8 * self.slot, 0)

        self._locked(release)
        self.map.close()
        os.close(self.fd)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def host_store_path(config: GatewayConfig) -> str:
    return config.state.path or f"/dev/shm/servelab-gateway-{config.port}.state"


def reset_host_store(path: str) -> None:
    """A fresh state (no lease held, no prefill in flight) for a gateway that is starting."""
    with open(path, "wb") as f:
        f.write(b"\0" * SIZE)
    os.chmod(path, 0o600)
