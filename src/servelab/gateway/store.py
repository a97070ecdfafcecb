"""Where the routing flags live: in this process (the default), or in Redis so that several gateway replicas
agree on realtime and maintenance and share one in-flight prefill budget. Times are wall-clock seconds so
that replicas can compare them."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any, Protocol

from servelab.gateway.state import Flag

FLAGS = ("maintenance", "realtime")


class Store(Protocol):
    async def flag(self, name: str, min_hold: float) -> bool: ...

    async def set_flag(self, name: str, on: bool, min_hold: float, ttl: float | None = None) -> None: ...

    async def add_prefill(self, tokens: int) -> int: ...

    async def prefill(self) -> int: ...

    async def close(self) -> None: ...


class MemoryStore:
    def __init__(self) -> None:
        self.flags = {name: Flag() for name in FLAGS}
        self.prefill_tokens = 0

    async def flag(self, name: str, min_hold: float) -> bool:
        return self.flags[name].settle(time.time(), min_hold)

    async def set_flag(self, name: str, on: bool, min_hold: float, ttl: float | None = None) -> None:
        self.flags[name].set(on, time.time(), min_hold, ttl)

    async def add_prefill(self, tokens: int) -> int:
        self.prefill_tokens += tokens
        return self.prefill_tokens

    async def prefill(self) -> int:
        return self.prefill_tokens

    async def close(self) -> None:
        return None


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

    async def set_flag(self, name: str, on: bool, min_hold: float, ttl: float | None = None) -> None:
        await self._update(name, lambda flag, now: flag.set(on, now, min_hold, ttl))

    async def add_prefill(self, tokens: int) -> int:
        return int(await self.redis.incrby(f"{self.prefix}prefill_tokens", tokens))

    async def prefill(self) -> int:
        return int(await self.redis.get(f"{self.prefix}prefill_tokens") or 0)

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
