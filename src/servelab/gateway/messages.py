"""What the gateway's HTTP/1.1 server (:mod:`.server`) and its handlers exchange: the limits it keeps, a parsed
request, the three kinds of answer, and the hooks through which the gateway sees each request's head (its key,
before the body is read) and each answer once it is over (its route and reason, for /metrics)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from servelab.gateway.outlet import Outlet

REASONS = {100: "Continue", 200: "OK", 204: "No Content", 400: "Bad Request", 401: "Unauthorized",
           403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout",
           413: "Payload Too Large", 429: "Too Many Requests", 431: "Request Header Fields Too Large",
           499: "Client Closed Request", 500: "Internal Server Error", 502: "Bad Gateway",
           503: "Service Unavailable", 504: "Gateway Timeout"}  # fmt: skip
Headers = list[tuple[str, str]]


@dataclass(frozen=True)
class ServerLimits:
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0  # the whole body, counted from the end of its head (not per pause)
    body_pause_s: float = 10.0  # and no pause between its reads longer than this
    keepalive_s: float = 75.0
    max_header_bytes: int = 16 * 1024
    max_headers: int = 100
    max_body_bytes: int = 16 * 2**20
    max_connections: int = 10_000
    max_pipelined: int = 8
    access_log: bool = False  # one line per request when its answer is over (:mod:`.access`)


@dataclass
class Request:
    method: str
    path: str
    query: bytes
    headers: dict[bytes, bytes]  # lower-case names; a repeated field keeps its last value
    body: bytes = b""
    keep_alive: bool = True
    http10: bool = False  # an HTTP/1.0 client: no chunked encoding, the connection closes after the answer
    outlet: Outlet | None = None  # the handler's direct line to the client (streams, keep-alive comments)
    gated: bool = False  # the server's gate passed its head (the key a path wants was checked there)

    def header(self, name: bytes) -> str:
        return self.headers.get(name, b"").decode("latin-1")


@dataclass
class Response:
    status: int
    body: bytes = b""
    headers: Headers = field(default_factory=list)
    content_type: str = "application/json"


@dataclass
class StreamResponse:
    status: int
    chunks: AsyncIterator[bytes]
    headers: Headers = field(default_factory=list)
    content_type: str = "text/event-stream"


@dataclass
class Sent:
    """The handler wrote its response through the request's outlet."""


Handler = Callable[[Request], Awaitable[Response | StreamResponse | Sent]]
Gate = Callable[[str, str, dict[bytes, bytes]], Response | None]  # method, path, head fields: a refusal or None
Observe = Callable[[int, Headers], None]  # an answer's status and headers, once it is over


@dataclass(frozen=True)
class ServerHooks:
    gate: Gate | None = None  # asked on each request head, before its body is read: a refusal ends the connection
    observe: Observe | None = None  # told of every answer (a client that left mid-answer included)


if sys.version_info >= (3, 12):

    def start_task(loop: asyncio.AbstractEventLoop, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run the handler at once, in this read callback, up to its first wait (its upstream's answer)."""
        return asyncio.Task(work, loop=loop, eager_start=True)

else:

    def start_task(loop: asyncio.AbstractEventLoop, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        return loop.create_task(work)
