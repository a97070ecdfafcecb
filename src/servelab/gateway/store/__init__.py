"""Where the routing state lives: in this process (the default), in a file shared by the worker processes of
one host (``host``: no Redis needed on one machine), or in Redis, so that gateway replicas on several hosts
share the leases (maintenance, realtime) and one in-flight prefill budget. The rules every backend keeps are in
:mod:`.base`."""

from __future__ import annotations

from typing import TYPE_CHECKING

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
from servelab.gateway.store.memory import MemoryStore
from servelab.gateway.store.redis import RedisStore

if TYPE_CHECKING:
    from servelab.gateway.config import GatewayConfig

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


def settings(config: GatewayConfig) -> Settings:
    s = config.state
    return Settings(min_hold_s=config.policy.min_hold_s, max_leases=s.max_leases, charge_ttl_s=s.charge_ttl_s,
                    timeout_s=s.timeout_s, retry_s=s.retry_s,
                    recovery_s=max(s.charge_ttl_s, config.policy.realtime_ttl_s),
                    budget=config.policy.realtime_prefill_budget_tokens)  # fmt: skip


def make_store(config: GatewayConfig) -> Store:
    if config.state.backend == "redis":
        return RedisStore(config.state.redis_url, config.state.prefix, settings(config))
    if config.state.backend == "host":
        return HostStore(host_store_path(config), settings(config))
    return MemoryStore(settings(config))
