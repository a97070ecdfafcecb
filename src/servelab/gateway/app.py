"""The OpenAI-compatible proxy: /v1/chat/completions and /v1/completions routed by the policy; /v1/models,
admin, health and metrics in :mod:`.endpoints`. Served by :mod:`.server`; upstreams reached by :mod:`.client`."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import orjson

from servelab.engines.control import APPLY_TEMPLATE, TOKENIZE, token_count, tokenize_body
from servelab.gateway.body import BadBody, parse_body
from servelab.gateway.checks import unreachable
from servelab.gateway.client import HttpClient, UpstreamError
from servelab.gateway.config import GatewayConfig
from servelab.gateway.estimate import Admission, Estimate
from servelab.gateway.keys import KeyRing
from servelab.gateway.messages import Request, Response, Sent, StreamResponse
from servelab.gateway.metrics import GatewayMetrics
from servelab.gateway.outlet import Outlet
from servelab.gateway.pipe import WHOLE_FIELDS, Pipe, Watchdog, passed_on
from servelab.gateway.policy import EXTERNAL, LOCAL, Decision, Facts, decide
from servelab.gateway.poll import BusyPoll
from servelab.gateway.record import Recorder
from servelab.gateway.sse import EventRelay, error_event
from servelab.gateway.state import Health
from servelab.gateway.store import Limits, Store, make_store
from servelab.gateway.tokenizer import load_counter
from servelab.gateway.upstream import BeforeFirstByte, Opened, encoded_body, make_client, open_stream

SHED_REASONS = ("realtime_long_prefill", "realtime_prefill_budget")
BUDGET_TAKEN = "local: the realtime prefill budget was taken by concurrent requests"
PATHS = {"/v1/chat/completions": "/chat/completions", "/v1/completions": "/completions"}
KEEPALIVE = b": keep-alive\n\n"
_REQUESTS = itertools.count(1)  # a charge's id: unique in this process (charges are owned per process)
Headers = list[tuple[str, str]]


def error(status: int, message: str, kind: str, headers: Headers | None = None) -> Response:
    return Response(status, orjson.dumps({"error": {"message": message, "type": kind}}), headers or [])


@dataclass
class Attempt:
    route: str
    opened: Opened


@dataclass
class _Plan:
    """One request's routing, decided before any upstream is tried."""

    body: dict[str, Any]
    decision: Decision
    est: Estimate
    routes: list[str]
    outlet: Outlet | None  # a stream's direct line to the client (None: not streamed)
    path: str = ""
    arrived_ns: int = 0  # monotonic, when the body was read (a recorded trace's timestamp)


class Gateway:
    def __init__(self, config: GatewayConfig, store: Store | None = None, poll: BusyPoll | None = None) -> None:
        self.config, self.metrics, self.health = config, GatewayMetrics(), Health()
        self.poll = poll or BusyPoll(None)  # off
        self.external_error: str | None = "not checked yet"  # why the external upstream cannot be reached; None: it can
        self.store: Store = store or make_store(config)
        self.clients: dict[str, HttpClient] = {}
        self._tasks: list[asyncio.Task[None]] = []
        policy = config.policy
        long_figure = max(policy.prefill_threshold_tokens, policy.realtime_prefill_budget_tokens) + 1
        self.admission = Admission(
            None, self.exact_tokens, long_figure, policy.bound_tokens_max, policy.prefill_threshold_tokens
        )
        self._counter_settled = False  # the engine has not yet said which model folder it serves
        self._limits = Limits(policy.prefill_threshold_tokens, policy.realtime_prefill_budget_tokens)
        self.client_keys = KeyRing(config.keys.clients)
        record = config.record
        self.recorder = Recorder(Path(record.path), record.block_tokens) if record.path else None

    # ---- lifecycle -------------------------------------------------------------------------------------
    async def start(self) -> None:
        self.clients[LOCAL] = make_client(self.config.local)
        await self._load_counter()
        if self.config.external is not None:
            self.clients[EXTERNAL] = make_client(self.config.external)
            self._tasks.append(asyncio.create_task(self._watch_external(self.config.external.url)))
        self._tasks.append(asyncio.create_task(self._watch_local()))

    async def _load_counter(self) -> None:
        self.admission.counter, self._counter_settled = await load_counter(self.config.local, self.clients[LOCAL])

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for client in self.clients.values():
            await client.aclose()
        await self.store.close()
        if self.recorder is not None:
            self.recorder.close()

    async def _watch_local(self) -> None:
        policy, path = self.config.policy, self.config.local.health_path
        while True:
            try:
                status, _ = await self.clients[LOCAL].get(path, timeout=policy.health_timeout_s, root=True)
                ok, why = status == 200, "" if status == 200 else f"health check answered HTTP {status}"
            except (UpstreamError, TimeoutError) as exc:
                ok, why = False, f"{type(exc).__name__}: {exc}"
            self.health.record(ok, policy.unhealthy_after, policy.healthy_after, why)
            if ok and not self._counter_settled:  # an engine that was not up at our start: its folder now
                await self._load_counter()
            await asyncio.sleep(policy.health_interval_s)

    async def _watch_external(self, url: str) -> None:
        """Whether the external API can be reached at all (its name resolves, its port answers): /readyz says
        ready on it alone only while it can."""
        policy = self.config.policy
        while True:
            self.external_error = await unreachable(url, policy.health_timeout_s)
            await asyncio.sleep(policy.health_interval_s)

    # ---- routing ---------------------------------------------------------------------------------------
    async def facts(self, tokens: int) -> Facts:
        """What the policy decides on; the store's faults are its own (degraded, never raised)."""
        seen = await self.store.snapshot()
        return Facts(prompt_tokens=tokens, maintenance=seen.maintenance, local_healthy=self.health.healthy,
                     realtime=seen.realtime, local_prefill_tokens=seen.prefill_tokens)  # fmt: skip

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
        """The local engine's own count of one chat or one prompt text: vLLM's /tokenize takes the chat with
        every field its template is handed (special tokens asked for: a larger count is safe); llama.cpp's takes
        text only (it answers an empty list for a chat), so there the chat is rendered by its /apply-template."""
        keys = ("messages", "prompt", "tools", "chat_template_kwargs", "add_generation_prompt",
                "continue_final_message", "documents")  # fmt: skip
        payload: dict[str, Any] = {k: body[k] for k in keys if k in body}
        payload["model"], payload["add_special_tokens"] = body.get("model", ""), True
        if "prompt" in payload:
            payload = tokenize_body(payload["model"], payload["prompt"])
        try:
            count = await self._tokenize(payload)
            if count or "messages" not in payload:
                return count
            status, data = await self.clients[LOCAL].post(APPLY_TEMPLATE, orjson.dumps(payload), 10, root=True)
            prompt = orjson.loads(data).get("prompt") if status == 200 else None
            return await self._tokenize(tokenize_body(payload["model"], prompt)) if isinstance(prompt, str) else None
        except (UpstreamError, TimeoutError, ValueError, AttributeError):
            return None

    async def _tokenize(self, payload: dict[str, Any]) -> int | None:
        status, data = await self.clients[LOCAL].post(TOKENIZE, orjson.dumps(payload), 10, root=True)
        return token_count(status, orjson.loads(data) if status == 200 else None)

    # ---- requests --------------------------------------------------------------------------------------
    def rehearse(self, request: Request, body: dict[str, Any]) -> bytes:
        """The request path up to the upstream write with no effect (no store write, metric or I/O): the key
        check, the count in process (when loaded), the policy on the health as it is, the upstream request's bytes
        (:mod:`.warm`)."""
        self.client_denied(request)
        policy = self.config.policy
        tokens = self.admission.rehearse(request.path, body)
        facts = Facts(prompt_tokens=tokens, maintenance=False,
                      local_healthy=self.health.healthy, realtime=False, local_prefill_tokens=0)  # fmt: skip
        self.routes(decide(facts, policy.prefill_threshold_tokens, policy.realtime_prefill_budget_tokens))
        data = encoded_body(request.body, body, LOCAL, self.config)
        return self.clients[LOCAL].request_bytes("POST", PATHS[request.path], data) if LOCAL in self.clients else data

    def client_denied(self, request: Request) -> Response | None:
        """A missing or unknown client key: refused. A request whose head the server's gate passed (``gated``) was
        checked there, on the same header bytes (:meth:`head_denied`)."""
        return None if request.gated else self.head_denied(request.headers)

    def head_denied(self, headers: dict[bytes, bytes]) -> Response | None:
        if self.client_keys and not self.client_keys.admits(headers):
            return error(401, "missing or unknown API key", "authentication_error")
        return None

    async def completion(self, request: Request) -> Response | StreamResponse | Sent:
        if (denied := self.client_denied(request)) is not None:
            return denied
        try:
            body = parse_body(request.body, self.config.server.max_json_depth)
        except BadBody as exc:
            return error(400, str(exc), "invalid_request_error")
        policy, arrived = self.config.policy, time.monotonic_ns() if self.recorder is not None else 0
        est = await self.admission.figure(request.path, body, request.body)
        decision = decide(
            await self.facts(est.tokens), policy.prefill_threshold_tokens, policy.realtime_prefill_budget_tokens
        )
        routes = self.routes(decision)
        if not routes:
            return self._unavailable(decision, est)
        outlet = request.outlet if body.get("stream") else None
        plan = _Plan(body, decision, est, routes, outlet, request.path, arrived)
        opening = self._open_first(request.body, PATHS[request.path], plan)
        if outlet is None or policy.keepalive_s <= 0:
            return await self._answer(await opening, plan)
        # A stream whose upstream stays silent past keepalive_s (a long prefill) starts now with keep-alive
        # comments; the wait itself is this task's, so a client that leaves cancels the upstream request.
        timer = asyncio.get_running_loop().call_later(policy.keepalive_s, self._keepalive, outlet, plan)
        try:
            got = await opening
        finally:
            timer.cancel()
            outlet.stop()
        if outlet.started and (got[0] is None or got[0].opened.pipe is None):
            return StreamResponse(200, self._after_keepalive(got, decision))
        return await self._answer(got, plan)

    def _keepalive(self, outlet: Outlet, plan: _Plan) -> None:
        """The upstream is still silent: the stream starts with keep-alive comments (its head built now)."""
        every = self.config.policy.keepalive_s
        outlet.start(200, self._headers(plan.decision.route, plan, failed_over=False), "text/event-stream",
                     KEEPALIVE, every)  # fmt: skip

    async def _answer(self, got: tuple[Attempt | None, list[str]], plan: _Plan) -> Response | Sent:
        attempt, errors = got
        if attempt is None:
            if errors and all(e == BUDGET_TAKEN for e in errors):  # shed, as the policy would have (a race)
                return self._unavailable(Decision(LOCAL, "realtime_prefill_budget"), plan.est)
            return self._failed(plan.decision, errors)
        if attempt.opened.pipe is not None:
            return await self._piped(attempt, attempt.opened.pipe, plan)
        headers = self._headers(attempt.route, plan, failed_over=attempt.route != plan.routes[0])
        status = attempt.opened.response.status
        if status in (401, 403) and attempt.route == EXTERNAL:
            attempt.opened.response.close()
            return error(502, f"the external API refused the gateway's credentials (HTTP {status})",
                         "upstream_auth_error", [*headers, ("x-should-retry", "false")])  # fmt: skip
        headers += passed_on(attempt.opened.response.headers, WHOLE_FIELDS)
        return await self._whole(attempt, headers, plan)

    async def _open_first(self, raw: bytes, path: str, plan: _Plan) -> tuple[Attempt | None, list[str]]:
        """Open on the first route; on a failure before the first byte, once on the next. The local prefill
        budget is held while local is silent, and given back on every way out (cancellation included)."""
        errors: list[str] = []
        timeout = {LOCAL: self.config.local.read_timeout_s}
        if self.config.external is not None:
            timeout[EXTERNAL] = self.config.external.read_timeout_s
        tokens, charge = plan.est.tokens, f"{next(_REQUESTS):x}"
        for index, route in enumerate(plan.routes):
            if index:
                self.metrics.failovers.labels(route).inc()
            if route == LOCAL and not await self._prefill(charge, tokens):
                errors.append(BUDGET_TAKEN)
                continue
            pipe_for = partial(self._pipe, route, plan, bool(index)) if plan.outlet is not None else None
            self.poll.expect()
            try:
                data = encoded_body(raw, plan.body, route, self.config)
                opened = await open_stream(self.clients[route], path, data, timeout[route], pipe_for)
                return Attempt(route, opened), errors
            except BeforeFirstByte as exc:
                errors.append(f"{route}: {exc}")
            finally:
                self.poll.arrived()
                if route == LOCAL:
                    await self._release(charge)
        return None, errors

    def _pipe(self, route: str, plan: _Plan, failed_over: bool) -> Pipe:
        assert plan.outlet is not None
        asked_usage = bool((plan.body.get("stream_options") or {}).get("include_usage"))
        relay = EventRelay(asked_usage, lambda usage: self._usage(route, usage, plan))
        return Pipe(plan.outlet, relay, self._headers(route, plan, failed_over=failed_over))

    async def _piped(self, attempt: Attempt, pipe: Pipe, plan: _Plan) -> Sent:
        """A 200 stream going to the client through its pipe (the first piece already sent): wait for its end,
        say in band what broke it off (never retried after the first byte), then end the body. A stream that
        ends with an error event is counted by its kind."""
        response, gauge = attempt.opened.response, self.metrics.flight(attempt.route)
        pipe.watch = Watchdog(self.config.policy.idle_timeout_s, response.close)
        gauge.inc()
        try:
            failure = await pipe.done
            pipe.finish(*self._broken_off(attempt.route, pipe) if failure is not None else ())
            if pipe.relay.broken is not None:
                self.metrics.stream_error(pipe.headers, pipe.relay.broken)
        finally:
            pipe.close()
            response.close()  # a client disconnect cancels us here: the upstream stops too
            gauge.dec()
        return Sent()

    def _broken_off(self, route: str, pipe: Pipe) -> tuple[str, str]:
        """Who broke a stream off: the idle bound with the client not taking bytes names the client; with the
        upstream silent, the upstream; else the upstream's connection failed."""
        idle = self.config.policy.idle_timeout_s
        if pipe.watch is not None and pipe.watch.fired and pipe.paused:
            return "client_stalled", f"the client took nothing of the stream for {idle:g} s"
        if pipe.watch is not None and pipe.watch.fired:
            self.metrics.idle_timeouts.labels(route).inc()
            return "upstream_idle", f"{route} upstream sent nothing for {idle:g} s"
        return "upstream_disconnect", f"{route} upstream failed mid-stream"

    async def _after_keepalive(self, got: tuple[Attempt | None, list[str]], decision: Decision) -> AsyncIterator[bytes]:
        """A stream that began with keep-alive comments and got no 200 stream: the status is sent, so what went
        wrong is said in band (and counted under the route and reason the stream's head said)."""
        attempt, errors = got
        said = [("x-servelab-route", decision.route), ("x-servelab-reason", decision.reason)]
        if attempt is None:
            self.metrics.stream_error(said, "no_backend")
            yield error_event(f"no backend could serve this request: {'; '.join(errors)}", "no_backend")
            return
        try:
            status = attempt.opened.response.status
            self.metrics.stream_error(said, "upstream_status")
            text = (attempt.opened.first + await attempt.opened.response.read_all(64 * 1024))[:300]
            yield error_event(f"{attempt.route} answered HTTP {status}: {text.decode(errors='replace')}")
        finally:
            attempt.opened.response.close()

    async def _prefill(self, charge: str, tokens: int) -> bool:
        """Admit ``tokens`` to local under the charge ``charge``: checked against the realtime limits and charged
        in one step of the store (a concurrent admission cannot come between); False: refused, nothing charged.
        The gauge is read from the store when /metrics is scraped."""
        return await self.store.admit(charge, tokens, self._limits)

    async def _release(self, charge: str) -> None:
        """Give the charge back (once: a second release is a no-op), even when this task is being cancelled: an
        in-process store never suspends (so nothing can interrupt it, and no loop turn is spent); Redis is
        shielded."""
        if self.store.in_process:
            await self.store.release(charge)
        else:
            await asyncio.shield(self.store.release(charge))

    async def _whole(self, attempt: Attempt, headers: Headers, plan: _Plan) -> Response:
        """The upstream's whole answer, its bytes as they came. Broken off mid-body it is a 502, stalled a 504,
        both with this answer's route and reason (the upstream took the request: the client is told not to retry
        it, x-should-retry: false)."""
        response = attempt.opened.response
        gauge = self.metrics.flight(attempt.route)
        gauge.inc()
        idle = self.config.policy.idle_timeout_s
        taken = [*headers, ("x-should-retry", "false")]
        try:
            content = attempt.opened.first + await response.read_all(self.config.max_body_bytes * 4, idle)
        except UpstreamError as exc:
            return error(502, f"{attempt.route} upstream failed mid-response: {exc}", "upstream_error", taken)
        except TimeoutError:  # stalled mid-body with its connection open: the client is not held past the bound
            self.metrics.idle_timeouts.labels(attempt.route).inc()
            message = f"{attempt.route} upstream sent nothing for {idle:g} s mid-response"
            return error(504, message, "upstream_idle", taken)
        finally:
            response.close()
            gauge.dec()
        with contextlib.suppress(ValueError, AttributeError, TypeError):
            self._usage(attempt.route, orjson.loads(content).get("usage") or {}, plan)
        kind = response.header(b"content-type") or "application/json"
        return Response(response.status, content, headers, kind)

    def observe(self, status: int, headers: Headers) -> None:
        """Every answer, once it is over (the server's hook): counted under the route and reason its own
        x-servelab-* headers say, so /metrics and the headers never disagree, however the answer ended."""
        self.metrics.answered(status, headers)

    def _usage(self, route: str, usage: dict[str, Any], plan: _Plan) -> None:
        for kind in ("prompt_tokens", "completion_tokens"):
            if isinstance(usage.get(kind), int):
                self.metrics.usage(route, kind.removesuffix("_tokens"), usage[kind])
        if self.recorder is not None:
            counted = usage if route == LOCAL else {**usage, "prompt_tokens": None}  # another model's count
            self.recorder.note(self.admission.counter, plan.path, plan.body, plan.arrived_ns, counted)

    def _headers(self, route: str, plan: _Plan, *, failed_over: bool) -> Headers:
        reason = f"failover_from_{plan.decision.route}" if failed_over else plan.decision.reason
        return [("x-servelab-route", route), ("x-servelab-reason", reason),
                ("x-servelab-tokens", plan.est.header())]  # fmt: skip

    def _unavailable(self, decision: Decision, est: Estimate) -> Response:
        """429 when local could serve but the policy keeps it free for realtime (shedding: retry later is right);
        503 when nothing can serve."""
        if decision.reason in SHED_REASONS:
            headers = [("x-servelab-route", "none"), ("x-servelab-reason", decision.reason), ("retry-after", "10"),
                       ("x-should-retry", "true")]  # fmt: skip
            message = f"shed: realtime is active and this request (~{est.tokens} prompt tokens) would delay it"
            return error(429, message, "rate_limit_exceeded", headers)
        return self._no_backend(decision, f"no backend can serve this request (~{est.tokens} prompt tokens)", [])

    def _failed(self, decision: Decision, errors: list[str]) -> Response:
        """Every allowed route failed before its first byte: the gateway already failed over, so a client retry
        now would only repeat that (x-should-retry: false)."""
        message = f"no backend could serve this request: {'; '.join(errors)}"
        return self._no_backend(decision, message, [("x-should-retry", "false")])

    def _no_backend(self, decision: Decision, message: str, extra: Headers) -> Response:
        headers = [("x-servelab-route", "none"), ("x-servelab-reason", decision.reason), ("retry-after", "5"), *extra]
        return error(503, message, "no_backend", headers)
