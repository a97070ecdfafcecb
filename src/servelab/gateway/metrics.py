"""Prometheus metrics in servelab's own namespace, with bounded labels (route, reason, status class). With
several worker processes (PROMETHEUS_MULTIPROC_DIR set), every worker writes its own files and /metrics adds
them up; the label children on the request path (requests, in flight, usage tokens) are cached, so counting is a
dict look-up."""

from __future__ import annotations

import os
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        ns, reg = "servelab_gateway", self.registry
        self.requests = Counter(f"{ns}_requests", "Requests by route, reason and status class",
                                ["route", "reason", "status"], registry=reg)  # fmt: skip
        self.in_flight = Gauge(f"{ns}_in_flight", "Requests in flight by route", ["route"], registry=reg,
                               multiprocess_mode="livesum")  # fmt: skip
        self.failovers = Counter(f"{ns}_failovers", "Failovers before the first byte", ["to"], registry=reg)
        self.tokens = Counter(f"{ns}_usage_tokens", "Tokens reported by upstream usage", ["route", "kind"],
                              registry=reg)  # fmt: skip
        self.local_prefill = Gauge(f"{ns}_local_prefill_tokens",
                                   "Prompt tokens in flight on local before their first byte", registry=reg,
                                   multiprocess_mode="mostrecent")  # fmt: skip
        self.idle_timeouts = Counter(f"{ns}_idle_timeouts", "Streams ended because the upstream went silent",
                                     ["route"], registry=reg)  # fmt: skip
        self.stream_errors = Counter(f"{ns}_stream_errors", "Streams (status sent) that ended with an error event, "
                                     "by kind: upstream_idle, upstream_disconnect, upstream_truncated, "
                                     "upstream_not_sse, upstream_encoded, client_stalled, no_backend, upstream_status",
                                     ["route", "reason", "kind"], registry=reg)  # fmt: skip
        self.flags = Gauge(f"{ns}_flag", "Routing flags (1 = on)", ["flag"], registry=reg,
                           multiprocess_mode="mostrecent")  # fmt: skip
        self.leases = Gauge(f"{ns}_realtime_leases", "Realtime leases held", registry=reg,
                            multiprocess_mode="mostrecent")  # fmt: skip
        self.degraded = Gauge(f"{ns}_state_degraded", "1 while the shared state is not reached (local policy)",
                              registry=reg, multiprocess_mode="max")  # fmt: skip
        self._children: dict[tuple[object, tuple[str, ...]], Any] = {}

    def child(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, cached: a dict look-up per request, not a labels() call."""
        key = (metric, labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def request(self, route: str, reason: str, status: int) -> None:
        self.child(self.requests, route, reason, f"{status // 100}xx").inc()

    def answered(self, status: int, headers: list[tuple[str, str]]) -> None:
        """An answer over: counted under the route and reason its own headers say (none said: not counted)."""
        route, reason = said(headers)
        if route is not None:
            self.request(route, reason, status)

    def stream_error(self, headers: list[tuple[str, str]], kind: str) -> None:
        route, reason = said(headers)
        self.child(self.stream_errors, route or "none", reason, kind).inc()

    def flight(self, route: str) -> Any:
        return self.child(self.in_flight, route)

    def usage(self, route: str, kind: str, count: int) -> None:
        self.child(self.tokens, route, kind).inc(count)

    def exposition(self) -> bytes:
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            from prometheus_client import multiprocess

            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
            return generate_latest(registry)
        return generate_latest(self.registry)


def said(headers: list[tuple[str, str]]) -> tuple[str | None, str]:
    """The route and reason an answer's x-servelab-* headers say."""
    route, reason = None, ""
    for name, value in headers:
        if name == "x-servelab-route":
            route = value
        elif name == "x-servelab-reason":
            reason = value
    return route, reason
