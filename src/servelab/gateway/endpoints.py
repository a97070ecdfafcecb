"""The gateway's routes: completions (in :mod:`.app`), /v1/models, the admin flags, health and metrics. No
redirects and nothing of the request echoed back (the Host header included)."""

from __future__ import annotations

from collections.abc import Awaitable

import orjson
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError

from servelab.gateway.app import Gateway, error, key_in
from servelab.gateway.client import UpstreamError
from servelab.gateway.messages import Request, Response, Sent, StreamResponse
from servelab.gateway.policy import EXTERNAL, LOCAL

MAX_TTL_S = 24 * 3600.0


class FlagBody(BaseModel):
    """POST /admin/realtime|maintenance: ``active`` a real boolean, ``ttl_s`` (realtime) finite and over 0."""

    model_config = ConfigDict(extra="forbid")
    active: StrictBool
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
        /admin/, the metrics key for /metrics and /readyz. The handlers check again (it costs a compare)."""
        if path.startswith("/v1/"):
            return self.gateway.client_denied(Request(method, path, b"", headers))
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
            try:
                body = FlagBody.model_validate_json(request.body or b"null")
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"]) or "body"
                return error(400, f'{where}: {first["msg"]} (send {{"active": true|false}}, realtime: "ttl_s" too)',
                             "invalid_request_error")  # fmt: skip
            policy = self.gateway.config.policy
            ttl = (body.ttl_s or policy.realtime_ttl_s) if flag == "realtime" else None  # both finite, over 0
            await self.gateway.store.set_flag(flag, body.active, policy.min_hold_s, ttl)
        return Response(200, orjson.dumps(await self.snapshot()))

    async def snapshot(self) -> dict[str, object]:
        gateway = self.gateway
        facts = await gateway.facts(0)
        for name, value in (("maintenance", facts.maintenance), ("realtime", facts.realtime),
                            ("local_healthy", facts.local_healthy)):  # fmt: skip
            gateway.metrics.flags.labels(name).set(int(value))
        gateway.metrics.local_prefill.set(facts.local_prefill_tokens)
        hold = gateway.config.policy.min_hold_s
        maintenance = await gateway.store.flag_state("maintenance", hold)
        realtime = await gateway.store.flag_state("realtime", hold)
        return {
            "maintenance": facts.maintenance,
            "maintenance_held_until": maintenance.held_until(hold),  # asked off inside its hold: on until then
            "realtime": facts.realtime,
            "realtime_held_until": realtime.held_until(hold),
            "realtime_lease_until": realtime.until if realtime.on else None,  # off then unless renewed
            "local_healthy": facts.local_healthy,
            "local_last_error": gateway.health.last_error,
            "local_prefill_tokens": facts.local_prefill_tokens,
            "external": EXTERNAL in gateway.clients,
            "external_reachable": EXTERNAL in gateway.clients and gateway.external_error is None,
            "external_last_error": gateway.external_error,
        }

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
        return Response(200 if ready else 503, orjson.dumps({"ready": ready, **state}))

    async def metrics(self, request: Request) -> Response:
        if (denied := self._private(request)) is not None:
            return denied
        await self.snapshot()
        return Response(200, self.gateway.metrics.exposition(), content_type="text/plain; version=0.0.4")
