"""The gateway's routes: completions (in :mod:`.app`), /v1/models, the admin flags, health and metrics. No
redirects and nothing of the request echoed back (the Host header included)."""

from __future__ import annotations

from collections.abc import Awaitable

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servelab.gateway.app import Gateway, error
from servelab.gateway.client import UpstreamError
from servelab.gateway.keys import key_in
from servelab.gateway.messages import Request, Response, Sent, StreamResponse
from servelab.gateway.policy import EXTERNAL, LOCAL
from servelab.gateway.store import (
    ADMIN_LEASE,
    LEASE_ID,
    FlagView,
    LeaseView,
    StoreState,
    StoreUnavailable,
    TooManyLeases,
)

MAX_TTL_S = 24 * 3600.0
LEASE_PATTERN = LEASE_ID.pattern
DEFAULT_LEASE = "default"  # the lease of a body that names none (the API before leases had ids)
HINT = {"realtime": '{"active": true|false, "lease": "voice-1", "ttl_s": 30}', "maintenance": '{"active": true|false}'}


class MaintenanceBody(BaseModel):
    """POST /admin/maintenance: ``active`` a real boolean, nothing else."""

    model_config = ConfigDict(extra="forbid", strict=True)
    active: bool


class RealtimeBody(MaintenanceBody):
    """POST /admin/realtime: ``active`` a real boolean, ``lease`` a short printable id (one per voice session),
    ``ttl_s`` a real number of seconds, finite, over 0, at most a day (a boolean is not a TTL)."""

    lease: str = Field(default=DEFAULT_LEASE, pattern=f"^{LEASE_PATTERN}$")
    ttl_s: float | None = Field(default=None, gt=0.0, le=MAX_TTL_S, allow_inf_nan=False)


class Router:
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.routes = {
            ("POST", "/v1/chat/completions"): gateway.completion,
            ("POST", "/v1/completions"): gateway.completion,
            ("GET", "/v1/models"): self.models,
            ("GET", "/healthz"): self.healthz,
            ("GET", "/readyz"): self.readyz,
            ("GET", "/metrics"): self.metrics,
        }

    def __call__(self, request: Request) -> Awaitable[Response | StreamResponse | Sent]:
        """The route's handler, called (the server awaits it: no coroutine of the router's own between them)."""
        handler = self.routes.get((request.method, request.path))
        if handler is not None:
            return handler(request)
        if request.path.startswith("/admin/") and request.method in ("GET", "POST"):
            return self.admin(request)
        return self.unrouted(request)

    def gate(self, method: str, path: str, headers: dict[bytes, bytes]) -> Response | None:
        """The key a path wants, checked on the request head before any of its body is read (the server answers a
        refusal without reading the body, and ends the connection): the client key for /v1/, the admin key for
        /admin/, the metrics key for /metrics and /readyz. The /v1/ handlers take a gated request's client key as
        checked here; the admin and metrics handlers check again."""
        if path.startswith("/v1/"):
            return self.gateway.head_denied(headers)
        if path.startswith("/admin/"):
            keys = self.gateway.config.keys.admin
            if not keys:
                return error(403, "the admin endpoints are off: set keys.admin in the config", "permission_error")
            if not key_in(Request(method, path, b"", headers), keys):
                return error(401, "missing or unknown admin key", "authentication_error")
            return None
        if path in ("/metrics", "/readyz"):
            return self._private(Request(method, path, b"", headers))
        return None

    async def unrouted(self, request: Request) -> Response:
        if any(path == request.path for _, path in self.routes):
            return error(405, f"{request.method} is not allowed here", "invalid_request_error")
        return error(404, "no such endpoint", "not_found")

    async def models(self, request: Request) -> Response:
        if (denied := self.gateway.client_denied(request)) is not None:
            return denied
        for route in (LOCAL, EXTERNAL):
            client = self.gateway.clients.get(route)
            if client is None:
                continue
            try:
                status, data = await client.get("/models", timeout=10)
            except (UpstreamError, TimeoutError):
                continue
            if status == 200:
                return Response(200, data)
        return error(503, "no backend answered /v1/models", "no_backend")

    async def admin(self, request: Request) -> Response:
        keys = self.gateway.config.keys.admin
        if not keys:
            return error(403, "the admin endpoints are off: set keys.admin in the config", "permission_error")
        if not key_in(request, keys):
            return error(401, "missing or unknown admin key", "authentication_error")
        flag = request.path.removeprefix("/admin/")
        if flag not in ("realtime", "maintenance", "state"):
            return error(404, "no such admin endpoint: realtime, maintenance or state", "not_found")
        if request.method == "POST" and flag != "state":
            refused = await self._set(flag, request.body)
            if refused is not None:
                return refused
        return Response(200, orjson.dumps(await self.snapshot()))

    async def _set(self, flag: str, raw: bytes) -> Response | None:
        """Take, renew or end a lease as the typed body says; a refusal as its answer (None: done)."""
        kind = RealtimeBody if flag == "realtime" else MaintenanceBody
        try:
            body = kind.model_validate_json(raw or b"null")
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "body"
            return error(400, f"{where}: {first['msg']} (send {HINT[flag]})", "invalid_request_error")
        store, policy = self.gateway.store, self.gateway.config.policy
        lease = body.lease if isinstance(body, RealtimeBody) else ADMIN_LEASE
        ttl = (body.ttl_s or policy.realtime_ttl_s) if isinstance(body, RealtimeBody) else None
        try:
            await (store.hold(flag, lease, ttl) if body.active else store.drop(flag, lease))
        except StoreUnavailable as exc:
            retry = str(max(1, round(exc.retry_after_s)))
            return error(503, f"the shared state cannot be reached now, retry: {exc.why}", "state_unavailable",
                         [("retry-after", retry)])  # fmt: skip
        except TooManyLeases as exc:
            return error(409, f"{exc}: end one, or renew one already held", "too_many_leases")
        except ValueError as exc:  # what the body's types let through and the store refuses
            return error(400, str(exc), "invalid_request_error")
        return None

    async def snapshot(self) -> dict[str, object]:
        """The state for the admin answers, /readyz and /metrics: one read of the store; times the store keeps
        on its own clock said as Unix times of this replica's clock (display only: nothing is decided on them)."""
        gateway = self.gateway
        state = await gateway.store.state()
        healthy = gateway.health.healthy
        self._gauges(state, healthy)
        now = gateway.store.wall()
        return {
            "maintenance": state.maintenance.on,
            "maintenance_held_until": _at(now, state.maintenance.held_for_s),  # asked off inside its hold
            "realtime": state.realtime.on,
            "realtime_held_until": _at(now, state.realtime.held_for_s),
            "realtime_lease_until": _at(now, _latest(state.realtime)),  # off then unless renewed
            "realtime_leases": [_lease(now, v) for v in state.realtime.leases],
            "local_healthy": healthy,
            "local_last_error": gateway.health.last_error,
            "local_prefill_tokens": state.prefill_tokens,
            "state_backend": gateway.config.state.backend,
            "state_degraded": state.degraded,  # why the shared state is not used now (None: it is)
            "external": EXTERNAL in gateway.clients,
            "external_reachable": EXTERNAL in gateway.clients and gateway.external_error is None,
            "external_last_error": gateway.external_error,
        }

    def _gauges(self, state: StoreState, healthy: bool) -> None:
        metrics = self.gateway.metrics
        for name, value in (("maintenance", state.maintenance.on), ("realtime", state.realtime.on),
                            ("local_healthy", healthy)):  # fmt: skip
            metrics.flags.labels(name).set(int(value))
        metrics.local_prefill.set(state.prefill_tokens)
        metrics.leases.set(len(state.realtime.leases))
        metrics.degraded.set(int(state.degraded is not None))

    def _private(self, request: Request) -> Response | None:
        """/metrics and /readyz want a metrics (or admin) key once metrics keys are configured."""
        keys = self.gateway.config.keys
        if keys.metrics and not key_in(request, [*keys.metrics, *keys.admin]):
            return error(401, "missing or unknown metrics key", "authentication_error")
        return None

    async def healthz(self, request: Request) -> Response:
        return Response(200, b'{"ok": true}')

    async def readyz(self, request: Request) -> Response:
        if (denied := self._private(request)) is not None:
            return denied
        state = await self.snapshot()
        local = bool(state["local_healthy"] and not state["maintenance"])
        ready = local or bool(state["external_reachable"])  # a route can serve
        degraded = state["state_degraded"] is not None  # ready or not, it says so (the policy is the local one)
        return Response(200 if ready else 503, orjson.dumps({"ready": ready, "degraded": degraded, **state}))

    async def metrics(self, request: Request) -> Response:
        if (denied := self._private(request)) is not None:
            return denied
        await self.snapshot()
        return Response(200, self.gateway.metrics.exposition(), content_type="text/plain; version=0.0.4")


def _at(now: float, seconds: float | None) -> float | None:
    return None if seconds is None else now + seconds


def _lease(now: float, view: LeaseView) -> dict[str, object]:
    return {
        "lease": view.id,
        "owner": view.owner,
        "expires_in_s": view.expires_in_s,
        "until": _at(now, view.expires_in_s),
    }


def _latest(flag: FlagView) -> float | None:
    """Until when the flag's leases hold it on (None: off, or a lease with no expiry)."""
    left = [v.expires_in_s for v in flag.leases]
    return None if not flag.on or not left or None in left else max(x for x in left if x is not None)
