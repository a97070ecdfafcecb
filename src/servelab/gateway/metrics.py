"""Prometheus metrics in servelab's own namespace, with bounded labels (route, reason, status class)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        ns = "servelab_gateway"
        self.requests = Counter(
            f"{ns}_requests", "Requests by route, reason and status class", ["route", "reason", "status"],
            registry=self.registry,
        )  # fmt: skip
        self.in_flight = Gauge(f"{ns}_in_flight", "Requests in flight by route", ["route"], registry=self.registry)
        self.failovers = Counter(f"{ns}_failovers", "Failovers before the first byte", ["to"], registry=self.registry)
        self.tokens = Counter(
            f"{ns}_usage_tokens", "Tokens reported by upstream usage", ["route", "kind"], registry=self.registry
        )
        self.local_prefill = Gauge(
            f"{ns}_local_prefill_tokens", "Prompt tokens in flight on local before their first byte",
            registry=self.registry,
        )  # fmt: skip
        self.idle_timeouts = Counter(
            f"{ns}_idle_timeouts", "Streams ended because the upstream went silent", ["route"], registry=self.registry
        )
        self.flags = Gauge(f"{ns}_flag", "Routing flags (1 = on)", ["flag"], registry=self.registry)
