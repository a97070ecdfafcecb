"""Talking to one upstream: the request as that upstream wants it, opened up to its first body byte so a
failure before it can fail over."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import httpx

from servelab.engines.client import api_base
from servelab.gateway.config import GatewayConfig, Upstream


class BeforeFirstByte(Exception):
    """The upstream failed before sending any of its body: the request may go elsewhere, once."""


@dataclass
class Opened:
    response: httpx.Response
    first: bytes  # the first body bytes ("" for an empty body)
    rest: Any  # the async iterator over the remaining raw bytes


def upstream_body(body: dict[str, Any], route: str, config: GatewayConfig) -> dict[str, Any]:
    """External: engine-only fields stripped, the model alias rewritten. Streams ask for usage either way."""
    out = copy.deepcopy(body)
    upstream = config.external if route == "external" else config.local
    if route == "external":
        for name in config.strip_for_external:
            out.pop(name, None)
    if upstream is not None and upstream.model:
        out["model"] = upstream.model
    if out.get("stream"):
        options = dict(out.get("stream_options") or {})
        options["include_usage"] = True
        out["stream_options"] = options
    return out


def make_client(upstream: Upstream) -> httpx.AsyncClient:
    timeout = httpx.Timeout(connect=upstream.connect_timeout_s, read=upstream.read_timeout_s, write=60.0, pool=10.0)
    headers = {"Authorization": f"Bearer {key}"} if (key := upstream.api_key()) else {}
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=100)
    return httpx.AsyncClient(base_url=api_base(upstream.url), timeout=timeout, headers=headers, limits=limits)


async def open_stream(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> Opened:
    """POST and read up to the first body bytes. Connection errors, timeouts and 5xx before then raise
    BeforeFirstByte; a 4xx is the upstream's answer and is passed on."""
    request = client.build_request("POST", path, json=body)
    try:
        response = await client.send(request, stream=True)
    except httpx.HTTPError as exc:
        raise BeforeFirstByte(f"{type(exc).__name__}: {exc}") from exc
    if response.status_code >= 500:
        text = (await response.aread())[:300].decode("utf-8", errors="replace")
        await response.aclose()
        raise BeforeFirstByte(f"HTTP {response.status_code}: {text}")
    chunks = response.aiter_bytes()
    try:
        first = await anext(chunks, b"")
    except httpx.HTTPError as exc:
        await response.aclose()
        raise BeforeFirstByte(f"{type(exc).__name__} before the first byte: {exc}") from exc
    return Opened(response, first, chunks)
