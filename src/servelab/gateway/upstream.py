"""Talking to one upstream: the request as that upstream wants it, opened up to its first body byte so a
failure before it can fail over."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from servelab.core.urls import api_base
from servelab.gateway.body import dumps
from servelab.gateway.client import HttpClient, UpstreamError, UpstreamResponse
from servelab.gateway.config import GatewayConfig, Upstream
from servelab.gateway.pipe import Pipe
from servelab.gateway.slots import pool_cap


class BeforeFirstByte(Exception):
    """The upstream failed before sending any of its body: the request may go elsewhere, once."""


@dataclass
class Opened:
    response: UpstreamResponse
    first: bytes  # the first body bytes ("" for an empty body, or when a pipe took them)
    pipe: Pipe | None = None  # the body goes to the client through this pipe (a 200 stream)


def upstream_body(body: dict[str, Any], route: str, config: GatewayConfig) -> dict[str, Any]:
    """External: engine-only fields stripped, the model alias rewritten. Streams ask for usage either way.
    A shallow copy: the client's body is left as it was."""
    out = dict(body)
    upstream = config.external if route == "external" else config.local
    if route == "external":
        for name in config.strip_for_external:
            out.pop(name, None)
    if upstream is not None and upstream.model:
        out["model"] = upstream.model
    if out.get("stream"):
        out["stream_options"] = {**(out.get("stream_options") or {}), "include_usage": True}
    return out


USAGE_ON = b',"stream_options":{"include_usage":true}}'


def encoded_body(raw: bytes, body: dict[str, Any], route: str, config: GatewayConfig) -> bytes:
    """The bytes to send: the client's own when nothing needs to change (local, no alias, not streamed or already
    asking for usage); a local stream that does not ask gets the ask spliced in before the closing brace (the body
    is a valid, non-empty JSON object without that key); anything else is re-encoded."""
    if route == "local" and not config.local.model:
        options = body.get("stream_options")
        if not body.get("stream") or (isinstance(options, dict) and options.get("include_usage") is True):
            return raw
        if options is None and "stream_options" not in body:
            end = raw.rstrip()
            if end.endswith(b"}"):
                return end[:-1] + USAGE_ON
    return dumps(upstream_body(body, route, config))


def make_client(upstream: Upstream) -> HttpClient:
    headers = {"authorization": f"Bearer {key}"} if (key := upstream.api_key()) else {}
    return HttpClient(api_base(upstream.url), connect_timeout=upstream.connect_timeout_s, headers=headers,
                      max_idle=pool_cap(), max_idle_s=upstream.pool_idle_s)  # fmt: skip


async def open_stream(
    client: HttpClient, path: str, data: bytes, first_byte_timeout: float, pipe_for: Callable[[], Pipe] | None = None
) -> Opened:
    """POST and read up to the first body bytes. Connection errors, timeouts and 5xx before then raise
    BeforeFirstByte; a 4xx is the upstream's answer and is passed on. With ``pipe_for``, a 200's body goes to
    the client through the pipe it makes from its first byte (sent in the upstream's read callback, before this
    returns)."""
    response: UpstreamResponse | None = None
    pipe: Pipe | None = None
    try:
        async with asyncio.timeout(first_byte_timeout):
            response = await client.request("POST", path, data)
            if response.status >= 500:
                text = (await response.read_all(64 * 1024))[:300].decode("utf-8", errors="replace")
                raise BeforeFirstByte(f"HTTP {response.status}: {text}")
            if pipe_for is not None and response.status == 200:
                pipe = pipe_for()
                pipe.open(response)
                if (failure := await pipe.first) is not None:
                    raise failure
                return Opened(response, b"", pipe)
            first = await response.read()
    except BaseException as exc:
        if response is not None:
            response.close()
        if pipe is not None:
            pipe.close()
        if isinstance(exc, UpstreamError):
            sent = " (the request had been sent: not sent to it again)" if exc.sent else ""
            raise BeforeFirstByte(f"{exc}{sent}") from exc
        if isinstance(exc, TimeoutError):
            raise BeforeFirstByte(f"no first byte within {first_byte_timeout:g} s") from exc
        raise
    return Opened(response, first)
