"""Where the routing flags live: in this process (the default), in a file shared by the worker processes of
one host (``host``: no Redis needed on one machine), or in Redis so that gateway replicas on several hosts
agree on realtime and maintenance and share one in-flight prefill budget. Times are wall-clock seconds so
that processes can compare them."""

from __future__ import annotations

import fcntl
import math
import mmap
import os
import struct
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from servelab.gateway.state import Flag

if TYPE_CHECKING:
    from servelab.gateway.config import GatewayConfig

FLAGS = ("maintenance", "realtime")


class Store(Protocol):
    async def flag(self, name: str, min_hold: float) -> bool: ...

    async def set_flag(self, name: str, on: bool, min_hold: float, ttl: float | None = None) -> None: ...

    async def flag_state(self, name: str, min_hold: float) -> Flag:
        """The flag settled, with its times (a copy: what the admin answers say of it)."""
        ...

    async def add_prefill(self, tokens: int) -> int: ...

    async def prefill(self) -> int: ...

    async def snapshot(self, min_hold: float) -> tuple[bool, bool, int]:
        """Maintenance, realtime (both settled) and the prefill in flight, at once."""
        ...

    async def close(self) -> None: ...


class MemoryStore:
    in_process = True  # its coroutines never suspend

    def __init__(self) -> None:
        self.flags = {name: Flag() for name in FLAGS}
        self.prefill_tokens = 0

    async def flag(self, name: str, min_hold: float) -> bool:
        return self.flags[name].settle(time.time(), min_hold)

    async def flag_state(self, name: str, min_hold: float) -> Flag:
        self.flags[name].settle(time.time(), min_hold)
        return replace(self.flags[name])

    async def set_flag(self, name: str, on: bool, min_hold: float, ttl: float | None = None) -> None:
        self.flags[name].set(on, time.time(), min_hold, ttl)

    async def add_prefill(self, tokens: int) -> int:
        self.prefill_tokens += tokens
        return self.prefill_tokens

    async def prefill(self) -> int:
        return self.prefill_tokens

    async def snapshot(self, min_hold: float) -> tuple[bool, bool, int]:
        now, flags = time.time(), self.flags
        return flags["maintenance"].settle(now, min_hold), flags["realtime"].settle(now, min_hold), self.prefill_tokens

    async def close(self) -> None:
        return None


class HostStore:
    """The flags and the prefill in flight in a small memory-mapped file (under /dev/shm by default) that every
    worker process of the host maps. A flag is a read-modify-write under an exclusive ``flock`` (a lease may
    expire as it is read). The prefill in flight is one counter per store (a slot that only its own process
    writes), so adding and giving back a request's tokens takes no lock; a reader adds the slots up. A slot whose
    process died is taken over by the next store that opens, its tokens dropped: that worker's requests died with
    it. :func:`reset_host_store` (the parent, before the workers start) clears the file."""

    in_process = True  # its coroutines never suspend (flock is held for microseconds)
    FLAG = struct.Struct("<BBdd")  # on, off_requested, changed_at, until (NaN: no lease)
    SLOTS = 255  # page 1: how many slots were ever taken, their owners' pids, their tokens (8 bytes each)
    COUNT = mmap.PAGESIZE
    PIDS = COUNT + 8
    TOKENS = PIDS + 8 * SLOTS
    SIZE = 2 * mmap.PAGESIZE
    ONE = struct.Struct("<q")

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        if os.fstat(self.fd).st_size < self.SIZE:
            os.ftruncate(self.fd, self.SIZE)
        self.map = mmap.mmap(self.fd, self.SIZE)
        self._sums: dict[int, struct.Struct] = {}
        self.slot = self._locked(self._claim)

    def _locked(self, work: Callable[[], Any]) -> Any:
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        try:
            return work()
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)

    def _used(self) -> int:
        """How many slots were ever taken (bounded: a state file left by something else reads as sane)."""
        count: int = self.ONE.unpack_from(self.map, self.COUNT)[0]
        return min(max(count, 0), self.SLOTS)

    def _claim(self) -> int:
        """A slot of this store's own: a free one, one whose process is gone, or a new one."""
        used = self._used()
        pids = struct.unpack_from(f"<{used}q", self.map, self.PIDS)
        slot = next((i for i, pid in enumerate(pids) if pid == 0 or not _alive(pid)), used)
        if slot >= self.SLOTS:
            raise RuntimeError(f"more than {self.SLOTS} gateway processes share the state file")
        self.ONE.pack_into(self.map, self.PIDS + 8 * slot, os.getpid())
        self.ONE.pack_into(self.map, self.TOKENS + 8 * slot, 0)
        self.ONE.pack_into(self.map, self.COUNT, max(used, slot + 1))
        return slot

    def _total(self) -> int:
        used = self._used()
        sums = self._sums.get(used) or self._sums.setdefault(used, struct.Struct(f"<{used}q"))
        return sum(sums.unpack_from(self.map, self.TOKENS))

    def _offset(self, name: str) -> int:
        return FLAGS.index(name) * self.FLAG.size

    def _read(self, name: str) -> Flag:
        on, off, changed, until = self.FLAG.unpack_from(self.map, self._offset(name))
        return Flag(bool(on), changed if changed else -math.inf, None if math.isnan(until) else until, bool(off))

    def _write(self, name: str, flag: Flag) -> None:
        until = math.nan if flag.until is None else flag.until
        changed = 0.0 if flag.changed_at == -math.inf else flag.changed_at
        self.FLAG.pack_into(self.map, self._offset(name), flag.on, flag.off_requested, changed, until)

    def _apply(self, name: str, action: Callable[[Flag, float], object], now: float) -> bool:
        """Read the flag, act on it, write it back (the caller holds the lock); whether it is on."""
        flag = self._read(name)
        action(flag, now)
        self._write(name, flag)
        return flag.on

    def _update(self, name: str, action: Callable[[Flag, float], object]) -> bool:
        return bool(self._locked(lambda: self._apply(name, action, time.time())))

    async def flag(self, name: str, min_hold: float) -> bool:
        return self._update(name, lambda flag, now: flag.settle(now, min_hold))

    async def flag_state(self, name: str, min_hold: float) -> Flag:
        seen: list[Flag] = []
        self._update(name, partial(_settled_copy, min_hold=min_hold, into=seen))
        return seen[-1]

    async def set_flag(self, name: str, on: bool, min_hold: float, ttl: float | None = None) -> None:
        self._update(name, lambda flag, now: flag.set(on, now, min_hold, ttl))

    async def add_prefill(self, tokens: int) -> int:
        at = self.TOKENS + 8 * self.slot  # this store's own slot: no other process writes it
        self.ONE.pack_into(self.map, at, self.ONE.unpack_from(self.map, at)[0] + tokens)
        return self._total()

    async def prefill(self) -> int:
        return self._total()

    async def snapshot(self, min_hold: float) -> tuple[bool, bool, int]:
        """The flags settled under one lock (two system calls), the prefill read without one."""

        def settle(flag: Flag, now: float) -> bool:
            return flag.settle(now, min_hold)

        def work() -> list[bool]:
            now = time.time()
            return [self._apply(name, settle, now) for name in FLAGS]

        maintenance, realtime = self._locked(work)
        return maintenance, realtime, self._total()

    async def close(self) -> None:
        def release() -> None:
            self.ONE.pack_into(self.map, self.PIDS + 8 * self.slot, 0)
            self.ONE.pack_into(self.map, self.TOKENS + 8 * self.slot, 0)

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
    """A fresh state (no flag on, no prefill in flight) for a gateway that is starting."""
    with open(path, "wb") as f:
        f.write(b"\0" * HostStore.SIZE)
    os.chmod(path, 0o600)


def make_store(config: GatewayConfig) -> Store:
    if config.state.backend == "redis":
        return RedisStore(config.state.redis_url, config.state.prefix)
    if config.state.backend == "host":
        return HostStore(host_store_path(config))
    return MemoryStore()


class RedisStore:
    """Flags as Redis hashes, settled by whichever replica reads them (a WATCHed transaction, so two replicas
    settling at once write one result); the prefill budget as a counter."""

    def __init__(self, url: str, prefix: str) -> None:
        import redis.asyncio as redis

        self.redis = redis.from_url(url, decode_responses=True)
        self.prefix = prefix

    def _key(self, name: str) -> str:
        return f"{self.prefix}flag:{name}"

    async def _update(self, name: str, action: Callable[[Flag, float], object]) -> bool:
        from redis.exceptions import WatchError

        key = self._key(name)
        async with self.redis.pipeline() as pipe:
            while True:
                try:
                    await pipe.watch(key)
                    raw: dict[Any, Any] = await pipe.hgetall(key)
                    flag = _load({str(k): str(v) for k, v in raw.items()})
                    action(flag, time.time())
                    pipe.multi()  # type: ignore[no-untyped-call]
                    mapping: dict[Any, Any] = _dump(flag)
                    pipe.hset(key, mapping=mapping)
                    await pipe.execute()
                    return flag.on
                except WatchError:
                    continue

    async def flag(self, name: str, min_hold: float) -> bool:
        return await self._update(name, lambda flag, now: flag.settle(now, min_hold))

    async def flag_state(self, name: str, min_hold: float) -> Flag:
        seen: list[Flag] = []
        await self._update(name, partial(_settled_copy, min_hold=min_hold, into=seen))
        return seen[-1]

    async def set_flag(self, name: str, on: bool, min_hold: float, ttl: float | None = None) -> None:
        await self._update(name, lambda flag, now: flag.set(on, now, min_hold, ttl))

    async def add_prefill(self, tokens: int) -> int:
        return int(await self.redis.incrby(f"{self.prefix}prefill_tokens", tokens))

    async def prefill(self) -> int:
        return int(await self.redis.get(f"{self.prefix}prefill_tokens") or 0)

    async def snapshot(self, min_hold: float) -> tuple[bool, bool, int]:
        return await self.flag("maintenance", min_hold), await self.flag("realtime", min_hold), await self.prefill()

    async def close(self) -> None:
        await self.redis.aclose()


def _dump(flag: Flag) -> dict[str, str]:
    return {k: repr(v) for k, v in asdict(flag).items()}


def _load(raw: dict[str, str]) -> Flag:
    if not raw:
        return Flag()
    until = raw.get("until", "None")
    return Flag(
        on=raw.get("on") == "True",
        changed_at=float(raw.get("changed_at", "-inf")),
        until=None if until == "None" else float(until),
        off_requested=raw.get("off_requested") == "True",
    )


def _settled_copy(flag: Flag, now: float, *, min_hold: float, into: list[Flag]) -> None:
    flag.settle(now, min_hold)
    into.append(replace(flag))
