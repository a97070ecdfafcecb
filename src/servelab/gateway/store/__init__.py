"""Where the routing state lives: in this process (the default), in a file shared by the worker processes of
one host (``host``: no Redis needed on one machine), or in Redis, so that gateway replicas on several hosts
share the leases (maintenance, realtime) and one in-flight prefill budget. The rules every backend keeps are in
:mod:`.base`."""

from __future__ import annotations

from servelab.gateway.store.base import (
    ADMIN_LEASE,
    FLAGS,
    LEASE_ID,
    FlagView,
    LeaseView,
    Limits,
    Settings,
    Snapshot,
    Store,
    StoreState,
    StoreUnavailable,
    TooManyLeases,
)
from servelab.gateway.store.host import HostStore, host_store_path, reset_host_store
from servelab.gateway.store.make import make_store, settings
from servelab.gateway.store.memory import MemoryStore
from servelab.gateway.store.redis import RedisStore

__all__ = [
    "ADMIN_LEASE",
    "FLAGS",
    "LEASE_ID",
    "FlagView",
    "HostStore",
    "LeaseView",
    "Limits",
    "MemoryStore",
    "RedisStore",
    "Settings",
    "Snapshot",
    "Store",
    "StoreState",
    "StoreUnavailable",
    "TooManyLeases",
    "host_store_path",
    "make_store",
    "reset_host_store",
    "settings",
]
