"""The OpenAI-compatible proxy: /v1/chat/completions, /v1/completions, /v1/models; admin, health and metrics."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
from prometheus_client import generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from servelab.engines.client import api_base
from servelab.gateway.config import GatewayConfig
from servelab.gateway.estimate import Estimate, estimate
from servelab.gateway.metrics import GatewayMetrics
from servelab.gateway.policy import EXTERNAL, LOCAL, Decision, Facts, decide
from servelab.gateway.sse import EventRelay, error_event
from servelab.gateway.state import Health
from servelab.gateway.store import MemoryStore, RedisStore, Store
from servelab.gateway.upstream import BeforeFirstByte, Opened, make_client, open_stream, upstream_body

SHED_REASONS = ("realtime_long_prefill", "realtime_prefill_budget")
PATHS = {"/v1/chat/completions": "/chat/completions", "/v1/completions": "/completions"}


def _error(status: int, message: str, kind: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind}}, status_code=status, headers=headers)


@dataclass
class Attempt:
    route: str
    opened: Opened


class Gateway:
    def __init__(self, config: GatewayConfig, store: Store | None = None) -> None:
        self.config, self.metrics, self.health = config, GatewayMetrics(), Health()
        self.store: Store = store or _store(config)
        self.clients: dict[str, httpx.AsyncClient] = {}
        self._health_task: asyncio.Task[None] | None = None

    # ---- lifecycle -------------------------------------------------------------------------------------
    async def start(self) -> None:
        self.clients[LOCAL] = make_client(self.config.local)
        if self.config.external is not None:
            self.clients[EXTERNAL] = make_client(self.config.external)
        self._health_task = asyncio.create_task(self._watch_local())

    async def stop(self) -> None:
        if self._health_task:
            self._health_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._health_task
        for client in self.clients.values():
            await client.aclose()
        await self.store.close()

    async def _watch_local(self) -> None:
        policy = self.config.policy
        url = self._local_root() + self.config.local.health_path
        while True:
            try:
                ok = (await self.clients[LOCAL].get(url, timeout=policy.health_interval_s)).status_code == 200
                error = "" if ok else "health check answered non-200"
            except httpx.HTTPError as exc:
                ok, error = False, f"{type(exc).__name__}: {exc}"
            self.health.record(ok, policy.unhealthy_after, policy.healthy_after, error)
            await asyncio.sleep(policy.health_interval_s)

    def _local_root(self) -> str:
        """The local server's root (its /health and /tokenize are not under /v1)."""
        return api_base(self.config.local.url).removesuffix("/v1")

    # ---- routing ---------------------------------------------------------------------------------------
    async def facts(self, tokens: int) -> Facts:
        hold = self.config.policy.min_hold_s
        return Facts(
            prompt_tokens=tokens,
            maintenance=await self.store.flag("maintenance", hold),
            local_healthy=self.health.healthy,
            realtime=await self.store.flag("realtime", hold),
            local_prefill_tokens=await self.store.prefill(),
        )

    def routes(self, decision: Decision) -> list[str]:
        """The decided route, then the one failover allowed before the first byte (never onto local where
        the policy kept local free: maintenance, unhealthy, realtime)."""
        order = [decision.route]
        if decision.route == LOCAL and EXTERNAL in self.clients:
            order.append(EXTERNAL)
        if decision.route == EXTERNAL and decision.reason == "long_prefill":
            order.append(LOCAL)
        return [r for r in order if r in self.clients]

    async def exact_tokens(self, body: dict[str, Any]) -> int | None:
        payload: dict[str, Any] = {k: body[k] for k in ("messages", "prompt", "tools") if k in body}
        payload["model"] = body.get("model", "")
        try:
            resp = await self.clients[LOCAL].post(self._local_root() + "/tokenize", json=payload, timeout=10)
            return int(resp.json()["count"]) if resp.status_code == 200 else None
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return None

    # ---- requests --------------------------------------------------------------------------------------
    async def completion(self, request: Request) -> Response:
        if (denied := self._client_denied(request)) is not None:
            return denied
        body_or_error = await self._read_json(request)
        if isinstance(body_or_error, Response):
            return body_or_error
        body = body_or_error
        policy = self.config.policy
        est = await estimate(body, policy.prefill_threshold_tokens, policy.exact_band, self.exact_tokens)
        decision = decide(
            await self.facts(est.tokens), policy.prefill_threshold_tokens, policy.realtime_prefill_budget_tokens
        )
        path = PATHS[request.url.path]
        routes = self.routes(decision)
        if not routes:
            return self._unavailable(decision, est)
        work = asyncio.create_task(self._open_first(body, path, routes, est.tokens))
        keepalive = policy.keepalive_s if body.get("stream") and policy.keepalive_s > 0 else None
        state = await self._watch(request, work, keepalive)
        if state == "gone":
            return Response(status_code=499)
        if state == "slow":
            return self._stream_late(work, body, decision, est)
        attempt, errors = work.result()
        if attempt is None:
            return self._failed(decision, errors)
        headers = self._headers(attempt.route, decision, est, failed_over=attempt.route != routes[0])
        if body.get("stream"):
            return self._stream(attempt, body, decision, headers)
        return await self._whole(attempt, decision, headers)

    async def _open_first(
        self, body: dict[str, Any], path: str, routes: list[str], tokens: int
    ) -> tuple[Attempt | None, str]:
        """Open on the first route; on a failure before the first byte, once on the next."""
        errors: list[str] = []
        for index, route in enumerate(routes):
            if index:
                self.metrics.failovers.labels(route).inc()
            if route == LOCAL:
                await self._prefill(tokens)
            try:
                opened = await open_stream(self.clients[route], path, upstream_body(body, route, self.config))
                return Attempt(route, opened), "; ".join(errors)
            except BeforeFirstByte as exc:
                errors.append(f"{route}: {exc}")
            finally:
                if route == LOCAL:
                    await self._prefill(-tokens)
        return None, "; ".join(errors)

    async def _watch(self, request: Request, work: asyncio.Task[Any], slow_after: float | None) -> str:
        """Wait for the upstream's first byte: "done"; "gone" when the client left first (the upstream request
        is cancelled, so a long prefill is not left running for nobody: vLLM aborts on the closed connection);
        "slow" after ``slow_after`` seconds, when a stream should start sending keep-alive comments."""
        waited = 0.0
        while not work.done():
            step = 0.25 if slow_after is None else min(0.25, max(slow_after - waited, 0.001))
            done, _ = await asyncio.wait({work}, timeout=step)
            waited += step
            if done:
                break
            if await request.is_disconnected():
                await _cancel(work)
                return "gone"
            if slow_after is not None and waited >= slow_after:
                return "slow"
        return "done"

    def _stream_late(
        self, work: asyncio.Task[Any], body: dict[str, Any], decision: Decision, est: Estimate
    ) -> Response:
        """A stream whose upstream is still silent (a long prefill): the response starts now, with SSE comments
        every ``keepalive_s`` so the client's read timeout does not fire; the route header names the decided
        route, and what goes wrong from here on is said in band."""
        headers = self._headers(decision.route, decision, est, failed_over=False)
        return StreamingResponse(
            self._late_events(work, body, decision), headers=headers, media_type="text/event-stream"
        )

    async def _late_events(
        self, work: asyncio.Task[Any], body: dict[str, Any], decision: Decision
    ) -> AsyncIterator[bytes]:
        try:
            yield KEEPALIVE
            while not work.done():
                done, _ = await asyncio.wait({work}, timeout=self.config.policy.keepalive_s)
                if not done:
                    yield KEEPALIVE
            attempt, errors = work.result()
            if attempt is None:
                self.metrics.requests.labels("none", decision.reason, "5xx").inc()
                yield error_event(f"no backend could serve this request: {errors}", "no_backend")
                return
            status = attempt.opened.response.status_code
            if status != 200:
                self.metrics.requests.labels(attempt.route, decision.reason, f"{status // 100}xx").inc()
                text = (attempt.opened.first + b"".join([d async for d in attempt.opened.rest]))[:300]
                await attempt.opened.response.aclose()
                yield error_event(f"{attempt.route} answered HTTP {status}: {text.decode(errors='replace')}")
                return
            self.metrics.requests.labels(attempt.route, decision.reason, "2xx").inc()
            async for out in self._relay(attempt, self._relay_for(attempt, body)):
                yield out
        finally:
            if not work.done():  # the client left while the upstream was silent
                await _cancel(work)

    async def _prefill(self, tokens: int) -> None:
        self.metrics.local_prefill.set(await self.store.add_prefill(tokens))

    def _stream(self, attempt: Attempt, body: dict[str, Any], decision: Decision, headers: dict[str, str]) -> Response:
        status = attempt.opened.response.status_code
        self.metrics.requests.labels(attempt.route, decision.reason, f"{status // 100}xx").inc()
        relay = self._relay_for(attempt, body)
        media = attempt.opened.response.headers.get("content-type", "text/event-stream")
        return StreamingResponse(self._relay(attempt, relay), status_code=status, headers=headers, media_type=media)

    def _relay_for(self, attempt: Attempt, body: dict[str, Any]) -> EventRelay:
        asked_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return EventRelay(asked_usage, lambda usage: self._usage(attempt.route, usage))

    async def _relay(self, attempt: Attempt, relay: EventRelay) -> AsyncIterator[bytes]:
        gauge = self.metrics.in_flight.labels(attempt.route)
        gauge.inc()
        try:
            if out := relay.feed(attempt.opened.first):
                yield out
            idle = self.config.policy.idle_timeout_s
            try:
                async for data in _idle_limited(attempt.opened.rest, idle):
                    if out := relay.feed(data):
                        yield out
                if rest := relay.flush():
                    yield rest
            except httpx.HTTPError as exc:  # after the first byte: say so in band, never retry
                yield error_event(
                    f"{attempt.route} upstream failed mid-stream: {type(exc).__name__}", "upstream_disconnect"
                )
            except TimeoutError:
                self.metrics.idle_timeouts.labels(attempt.route).inc()
                yield error_event(f"{attempt.route} upstream sent nothing for {idle:g} s", "upstream_idle")
        finally:
            await attempt.opened.response.aclose()  # a client disconnect cancels us here: the upstream stops too
            gauge.dec()

    async def _whole(self, attempt: Attempt, decision: Decision, headers: dict[str, str]) -> Response:
        gauge = self.metrics.in_flight.labels(attempt.route)
        gauge.inc()
        try:
            content = attempt.opened.first + b"".join([d async for d in attempt.opened.rest])
        except httpx.HTTPError as exc:
            return _error(502, f"{attempt.route} upstream failed mid-response: {type(exc).__name__}", "upstream_error")
        finally:
            await attempt.opened.response.aclose()
            gauge.dec()
        with contextlib.suppress(ValueError, AttributeError):
            self._usage(attempt.route, json.loads(content).get("usage") or {})
        status = attempt.opened.response.status_code
        self.metrics.requests.labels(attempt.route, decision.reason, f"{status // 100}xx").inc()
        return Response(content, status_code=status, headers=headers, media_type="application/json")

    def _usage(self, route: str, usage: dict[str, Any]) -> None:
        for kind in ("prompt_tokens", "completion_tokens"):
            if isinstance(usage.get(kind), int):
                self.metrics.tokens.labels(route, kind.removesuffix("_tokens")).inc(usage[kind])

    def _headers(self, route: str, decision: Decision, est: Estimate, *, failed_over: bool) -> dict[str, str]:
        reason = f"failover_from_{decision.route}" if failed_over else decision.reason
        return {
            "x-servelab-route": route,
            "x-servelab-reason": reason,
            "x-servelab-tokens": f"{est.tokens};{est.method}",
        }

    def _unavailable(self, decision: Decision, est: Estimate) -> Response:
        """503 when nothing can serve; 429 when local could but the policy keeps it free for realtime (shedding)."""
        if decision.reason in SHED_REASONS:
            self.metrics.requests.labels("none", decision.reason, "4xx").inc()
            headers = {"x-servelab-route": "none", "x-servelab-reason": decision.reason, "retry-after": "10"}
            message = f"shed: realtime is active and this request (~{est.tokens} prompt tokens) would delay it"
            return _error(429, message, "rate_limit_exceeded", headers)
        return self._no_backend(decision, f"no backend can serve this request (~{est.tokens} prompt tokens)")

    def _failed(self, decision: Decision, errors: str) -> Response:
        return self._no_backend(decision, f"no backend could serve this request: {errors}")

    def _no_backend(self, decision: Decision, message: str) -> Response:
        self.metrics.requests.labels("none", decision.reason, "5xx").inc()
        headers = {"x-servelab-route": "none", "x-servelab-reason": decision.reason, "retry-after": "5"}
        return _error(503, message, "no_backend", headers)

    async def _read_json(self, request: Request) -> dict[str, Any] | Response:
        limit = self.config.max_body_bytes
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limit:
            return _error(413, f"request body over {limit} bytes", "request_too_large")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                return _error(413, f"request body over {limit} bytes", "request_too_large")
            chunks.append(chunk)
        try:
            body = json.loads(b"".join(chunks))
        except ValueError:
            return _error(400, "the request body is not JSON", "invalid_request_error")
        if not isinstance(body, dict):
            return _error(400, "the request body is not a JSON object", "invalid_request_error")
        if "stream_options" in body and not isinstance(body["stream_options"], dict | None):
            return _error(400, "stream_options must be an object", "invalid_request_error")
        return body

    def _client_denied(self, request: Request) -> Response | None:
        keys = self.config.keys.clients
        if keys and _bearer(request) not in keys:
            return _error(401, "missing or unknown API key", "authentication_error")
        return None

    # ---- models, admin, health, metrics --------------------------------------------------------------
    async def models(self, request: Request) -> Response:
        if (denied := self._client_denied(request)) is not None:
            return denied
        for route in (LOCAL, EXTERNAL):
            if route in self.clients:
                with contextlib.suppress(httpx.HTTPError):
                    resp = await self.clients[route].get("/models", timeout=10)
                    if resp.status_code == 200:
                        return Response(resp.content, media_type="application/json")
        return _error(503, "no backend answered /v1/models", "no_backend")

    async def admin(self, request: Request) -> Response:
        admin_keys = self.config.keys.admin
        if not admin_keys:
            return _error(403, "the admin endpoints are off: set keys.admin in the config", "permission_error")
        if _bearer(request) not in admin_keys:
            return _error(401, "missing or unknown admin key", "authentication_error")
        flag = request.path_params["flag"]
        if flag not in ("realtime", "maintenance", "state"):
            return _error(404, f"no admin endpoint {flag!r}: realtime, maintenance or state", "not_found")
        if request.method == "POST" and flag != "state":
            try:
                data = await request.json()
                active = bool(data["active"])
                ttl = float(data.get("ttl_s", self.config.policy.realtime_ttl_s)) if flag == "realtime" else None
            except (ValueError, KeyError, TypeError, AttributeError):
                return _error(400, 'send {"active": true|false} (realtime: "ttl_s" too)', "invalid_request_error")
            await self.store.set_flag(flag, active, self.config.policy.min_hold_s, ttl)
        return JSONResponse(await self.snapshot())

    async def snapshot(self) -> dict[str, Any]:
        facts = await self.facts(0)
        for name, value in (
            ("maintenance", facts.maintenance),
            ("realtime", facts.realtime),
            ("local_healthy", facts.local_healthy),
        ):
            self.metrics.flags.labels(name).set(int(value))
        return {
            "maintenance": facts.maintenance,
            "realtime": facts.realtime,
            "local_healthy": facts.local_healthy,
            "local_last_error": self.health.last_error,
            "local_prefill_tokens": facts.local_prefill_tokens,
        }

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"ok": True})

    async def readyz(self, request: Request) -> Response:
        state = await self.snapshot()
        local_ok = state["local_healthy"] and not state["maintenance"]
        ready = local_ok or EXTERNAL in self.clients
        return JSONResponse({"ready": ready, **state}, status_code=200 if ready else 503)

    async def prometheus(self, request: Request) -> Response:
        await self.snapshot()
        return Response(generate_latest(self.metrics.registry), media_type="text/plain; version=0.0.4")


KEEPALIVE = b": keep-alive\n\n"


async def _cancel(work: asyncio.Task[Any]) -> None:
    """Cancel the upstream attempt and wait until it has let go (its connection closed: vLLM aborts)."""
    work.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await work


async def _idle_limited(chunks: AsyncIterator[bytes], seconds: float) -> AsyncIterator[bytes]:
    """The upstream's chunks, TimeoutError when none comes for ``seconds``."""
    while True:
        try:
            data = await asyncio.wait_for(anext(chunks), seconds)
        except StopAsyncIteration:
            return
        yield data


def _bearer(request: Request) -> str | None:
    value = request.headers.get("authorization", "")
    return value[7:].strip() if value.lower().startswith("bearer ") else None


def _store(config: GatewayConfig) -> Store:
    if config.state.backend == "redis":
        return RedisStore(config.state.redis_url, config.state.prefix)
    return MemoryStore()


def create_app(config: GatewayConfig, store: Store | None = None) -> tuple[Starlette, Gateway]:
    gateway = Gateway(config, store)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await gateway.start()
        try:
            yield
        finally:
            await gateway.stop()

    routes = [
        Route("/v1/chat/completions", gateway.completion, methods=["POST"]),
        Route("/v1/completions", gateway.completion, methods=["POST"]),
        Route("/v1/models", gateway.models, methods=["GET"]),
        Route("/admin/{flag:str}", gateway.admin, methods=["GET", "POST"]),
        Route("/healthz", gateway.healthz),
        Route("/readyz", gateway.readyz),
        Route("/metrics", gateway.prometheus),
    ]
    return Starlette(routes=routes, lifespan=lifespan), gateway
