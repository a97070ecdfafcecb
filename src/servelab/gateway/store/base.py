"""What every store keeps, whatever holds it: two flags made of leases, and the prefill in flight on the local
engine as charges owned per request.

A flag (``maintenance``, ``realtime``) is on while any of its leases is held, and for at least ``min_hold_s``
after it turned on (hysteresis: a flapping lease does not flip routing). A lease has an id, an owner (the
replica that last took it) and an expiry on the store's own clock (Redis ``TIME``; ``time.monotonic`` in one
host), never a replica's wall clock; ``maintenance`` holds one lease with no expiry. The number of leases of a
flag is bounded.

A charge is one request's prompt tokens, taken at admission together with the budget check (one step, with no
other admission between check and charge) and given back once, by request id, when its prefill ends."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

FLAGS = ("maintenance", "realtime")
ADMIN_LEASE = "admin"  # the one lease of maintenance
LEASE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}")


class StoreUnavailable(Exception):
    """The shared store cannot be reached now: the caller says so (503 with Retry-After), nothing is changed."""

    def __init__(self, why: str, retry_after_s: float) -> None:
        super().__init__(why)
        self.why, self.retry_after_s = why, retry_after_s


class TooManyLeases(Exception):
    """A new lease past the flag's bound (a renewal of a lease already held is never refused)."""


@dataclass(frozen=True)
class Settings:
    min_hold_s: float = 5.0  # a flag stays on at least this long after it turned on
    max_leases: int = 64  # leases of one flag held at once
    charge_ttl_s: float = 10.0  # a replica's charges end this long after it last renewed them (Redis)
    timeout_s: float = 0.3  # the longest wait on one Redis call
    retry_s: float = 0.5  # after a fault, Redis is left alone this long before a background probe
    recovery_s: float = 30.0  # after the shared state was lost (flushed, restarted): realtime assumed on this long
    budget: int = 16000  # the realtime prefill budget (a degraded snapshot counts the other replicas' shares)


@dataclass(frozen=True)
class Limits:
    """What local admission checks while realtime is on (off: every request is charged, none refused)."""

    threshold: int  # a prompt over this never goes local
    budget: int  # prompt tokens in flight on local, this request's included, at most this


@dataclass(frozen=True, slots=True)
class Snapshot:
    maintenance: bool
    realtime: bool
    prefill_tokens: int
    degraded: str | None = None  # why the shared store is not used now (None: it is)


@dataclass(frozen=True)
class LeaseView:
    id: str
    owner: str
    expires_in_s: float | None  # None: no expiry


@dataclass(frozen=True)
class FlagView:
    on: bool
    held_for_s: float | None  # on only by its hold: off in this many seconds unless a lease is taken
    leases: tuple[LeaseView, ...] = ()


@dataclass(frozen=True)
class StoreState:
    maintenance: FlagView
    realtime: FlagView
    prefill_tokens: int
    owners: int  # replicas (or worker processes) holding charges
    degraded: str | None = None


class Store(Protocol):
    in_process: bool  # its coroutines never suspend: nothing can come between a check and a charge
    wall: Callable[[], float]  # this replica's wall clock: to say the store's times as Unix times, never to decide

    async def snapshot(self) -> Snapshot:
        """Maintenance, realtime and the prefill in flight, read at once."""
        ...

    async def admit(self, request: str, tokens: int, limits: Limits) -> bool:
        """Charge ``tokens`` to ``request`` unless realtime is on and ``limits`` refuse them (one step)."""
        ...

    async def release(self, request: str) -> None:
        """Give back ``request``'s charge; a request with no charge (given back already, or never) is a no-op."""
        ...

    async def hold(self, flag: str, lease: str, ttl_s: float | None) -> None:
        """Take or renew ``lease`` of ``flag`` for ``ttl_s`` on the store's clock (None: until dropped)."""
        ...

    async def drop(self, flag: str, lease: str) -> None:
        """End ``lease`` of ``flag``; the flag's other leases stay."""
        ...

    async def state(self) -> StoreState: ...

    async def close(self) -> None: ...


@dataclass
class Ledger:
    """This process's own charges: request id -> (tokens, sequence number), and their total. The sequence grows
    with every charge, so a copy of the ledger says which later charges it cannot know of."""

    charges: dict[str, tuple[int, int]] = field(default_factory=dict)
    total: int = 0
    seq: int = 0
    changes: int = 0  # every add and pop

    def add(self, request: str, tokens: int) -> int:
        self.pop(request)
        self.seq += 1
        self.changes += 1
        self.charges[request] = (tokens, self.seq)
        self.total += tokens
        return self.seq

    def pop(self, request: str) -> int | None:
        found = self.take(request)
        return None if found is None else found[0]

    def take(self, request: str) -> tuple[int, int] | None:
        """The charge given back: (tokens, seq); None: none."""
        found = self.charges.pop(request, None)
        if found is not None:
            self.changes += 1
            self.total -= found[0]
        return found


@dataclass
class Leases:
    """One flag: its leases (id -> owner, expiry; ``math.inf``: none) and when it last turned on."""

    held: dict[str, tuple[str, float]] = field(default_factory=dict)
    since: float = -math.inf
    soonest: float = -math.inf  # no lease ends before this (a cheap test on the hot path; -inf: look)

    def expire(self, now: float) -> None:
        if now < self.soonest:
            return
        for lease in [k for k, (_, until) in self.held.items() if until <= now]:
            del self.held[lease]
        self.soonest = min((until for _, until in self.held.values()), default=math.inf)

    def on(self, now: float, min_hold: float) -> bool:
        self.expire(now)
        return bool(self.held) or now < self.since + min_hold

    def hold(self, lease: str, owner: str, until: float, now: float, settings: Settings) -> None:
        if not self.on(now, settings.min_hold_s):
            self.since = now
        if lease not in self.held and len(self.held) >= settings.max_leases:
            raise TooManyLeases(f"{settings.max_leases} leases are held already")
        if lease in self.held:
            self.soonest = -math.inf  # a renewal may move the soonest end later: look again
        self.held[lease] = (owner, until)
        self.soonest = min(self.soonest, until)

    def view(self, now: float, min_hold: float) -> FlagView:
        on = self.on(now, min_hold)
        held = self.since + min_hold - now if on and not self.held else None
        leases = tuple(LeaseView(k, owner, None if until == math.inf else until - now)
                       for k, (owner, until) in sorted(self.held.items()))  # fmt: skip
        return FlagView(on, held, leases)


def expiry(now: float, ttl_s: float | None) -> float:
    """When a lease taken now for ``ttl_s`` ends (``math.inf``: never), refusing what is no TTL."""
    if ttl_s is None:
        return math.inf
    if isinstance(ttl_s, bool) or not (math.isfinite(ttl_s) and ttl_s > 0):
        raise ValueError(f"a lease's ttl must be a finite number of seconds over 0, not {ttl_s!r}")
    return now + ttl_s


def check_lease(flag: str, lease: str) -> None:
    if flag not in FLAGS:
        raise ValueError(f"no such flag: {flag!r}")
    if not LEASE_ID.fullmatch(lease):
        raise ValueError("a lease id is 1-64 letters, digits and ._:@- (a letter or digit first)")


def refused(realtime: bool, tokens: int, in_flight: int, limits: Limits) -> bool:
    """The admission rule: while realtime is on, no prompt over the threshold and no more than the budget in
    flight, this one included. A charge is a count of tokens: a negative one (which would make room for others)
    is refused whatever the flag."""
    if type(tokens) is not int or tokens < 0:
        raise ValueError(f"a charge is a whole number of tokens, 0 or more, not {tokens!r}")
    return realtime and (tokens > limits.threshold or in_flight + tokens > limits.budget)
