"""The configured store: its settings from the gateway's config, and the backend it names."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servelab.gateway.store.base import Settings, Store
from servelab.gateway.store.host import HostStore, host_store_path
from servelab.gateway.store.memory import MemoryStore
from servelab.gateway.store.redis import RedisStore

if TYPE_CHECKING:
    from servelab.gateway.config import GatewayConfig


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
