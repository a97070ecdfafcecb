"""How many connections a worker holds, and which one gives way.

Open files: at start the soft limit is raised to the hard one (:func:`raise_open_files`), and the client
connections a worker takes are capped by it (:func:`connection_cap`), with room kept for what else each needs:
a client request in flight holds one upstream connection, each upstream's keep-alive pool holds idle ones
(:func:`pool_cap`), and :data:`RESERVE` is for the listening socket, the store, the log, health checks and the
interpreter's own files. So ``3 * cap + RESERVE <= limit``: a worker never meets EMFILE from its own
connections, where accept() failing would lock every new client out.

At the cap, a new connection takes the place of the one that has waited longest while holding no request (an
idle keep-alive connection, one whose head is still arriving, a refused one being drained): idle or keyless
connections cannot lock a real client out. A connection whose request is being read (its head passed the key
check) or answered never gives way; with no other to close, the new one is closed.
"""

from __future__ import annotations

import resource
from typing import Generic, Protocol, TypeVar

RESERVE = 64  # open files kept for everything but client and upstream connections
POOL_MAX = 512  # idle keep-alive connections per upstream, at most


class Evictable(Protocol):
    def evict(self) -> None: ...


C = TypeVar("C", bound=Evictable)


def raise_open_files() -> int:
    """Raise the open-file soft limit to the hard one; the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        want = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError):
            pass
    return soft


def open_files() -> int:
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def connection_cap(configured: int, files: int | None = None) -> int:
    """The client connections a worker may hold: ``configured``, at most a third of the open files left after
    :data:`RESERVE` (at least 1)."""
    files = open_files() if files is None else files
    return max(1, min(configured, (files - RESERVE) // 3))


def pool_cap(files: int | None = None) -> int:
    """Idle connections one upstream's pool may keep: half the connection cap, at most :data:`POOL_MAX` (two
    pools, local and external, then hold at most one cap between them)."""
    return max(1, min(POOL_MAX, connection_cap(1 << 30, files) // 2))


class Slots(Generic[C]):
    """The live connections, and among them those holding no request, oldest first (a dict keeps insertion
    order: taking one out and putting it back is O(1), and the next to give way is the first)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.live: set[C] = set()
        self.waiting: dict[C, None] = {}

    def admit(self, conn: C) -> bool:
        """A new connection; False when it cannot be held (every other one is busy)."""
        self.live.add(conn)
        self.waiting[conn] = None
        if len(self.live) <= self.limit:
            return True
        victim = next(iter(self.waiting))
        if victim is conn:
            self.remove(conn)
            return False
        self.remove(victim)
        victim.evict()
        return True

    def wait(self, conn: C) -> None:
        """``conn`` holds no request now (it goes last in line to give way)."""
        if conn in self.live:
            self.waiting.pop(conn, None)
            self.waiting[conn] = None

    def busy(self, conn: C) -> None:
        """``conn``'s request is being read or answered: it does not give way."""
        self.waiting.pop(conn, None)

    def remove(self, conn: C) -> None:
        self.live.discard(conn)
        self.waiting.pop(conn, None)
