"""HTTP and SSE as the gateway keeps them with clients and upstreams: 100 Continue only in its request's turn,
bytes passed on with their encoding (identity asked for), a stream request answered only with whole events and
ended with an error event when the upstream's stream was not one, or was cut short; a client that stops reading
named as such; every answer counted in /metrics under the route and reason its headers say.

The upstream is the hostile-peer FIXTURE (tests/fixtures/hostile_peers.py) where a real engine cannot produce the
fault: a gzip answer to a request for identity, a 200 JSON to a stream request, a stream cut inside an event or
without [DONE], a connection closed mid-body. Pipelined and non-reading clients are raw sockets (no client
library pipelines)."""

from __future__ import annotations

import json
import re
import socket
import time
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest

from servelab.gateway import running
from tests.fixtures.hostile_peers import HostileUpstream, hostile_upstream, url
from tests.unit.gateway.test_hardening import AUTH, CHAT, config

METRICS = {"authorization": "Bearer metrics-key"}
BODY = json.dumps(CHAT).encode()


@pytest.fixture(scope="module")
def upstream() -> Iterator[HostileUpstream]:
    with hostile_upstream() as up:
        yield up


def head(*extra: bytes, length: int = len(BODY)) -> bytes:
    fields = b"".join(x + b"\r\n" for x in extra)
    return (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer client-key\r\n"
            b"content-length: %d\r\n%b\r\n" % (length, fields))  # fmt: skip


def port(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


def read_until(sock: socket.socket, done: object, limit_s: float = 10) -> bytes:
    """Read until ``done(data)`` (a callable) holds, the server closes, or ``limit_s`` (a bound for a broken test,
    not a margin: the condition ends the wait)."""
    sock.settimeout(limit_s)
    data = b""
    while not done(data):  # type: ignore[operator]
        try:
            piece = sock.recv(65536)
        except TimeoutError:
            break
        if not piece:
            break
        data += piece
    return data


def samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """A metric's samples by their labels."""
    out = {}
    for labels, value in re.findall(rf"^{name}\{{(.*?)\}} (\S+)$", text, re.M):
        out[tuple(sorted(re.findall(r'(\w+)="(.*?)"', labels)))] = float(value)
    return out


def events(text: str) -> list[dict[str, object]]:
    return [json.loads(ln[6:]) for ln in text.splitlines() if ln.startswith("data: {")]


# ---- 100 Continue --------------------------------------------------------------------------------------------
def test_100_continue_of_a_pipelined_request_comes_after_the_answer_before_it(upstream: HostileUpstream) -> None:
    """A stream request and, in the same write, the head of a second one that expects 100 Continue: the 100 is
    sent only once the first answer has ended (it used to go out at once, inside that answer)."""
    with (
        running(config(url(upstream, "ok"))) as (base, _),
        socket.create_connection(("127.0.0.1", port(base))) as s,
    ):
        s.sendall(head() + BODY + head(b"expect: 100-continue"))
        first = read_until(s, lambda d: b"0\r\n\r\n" in d and b"100 Continue\r\n\r\n" in d)
        s.sendall(BODY)
        second = read_until(s, lambda d: d.endswith(b"0\r\n\r\n"))
    assert first.startswith(b"HTTP/1.1 200 "), first[:200]
    assert first.index(b"0\r\n\r\n") < first.index(b"HTTP/1.1 100 Continue"), first
    assert first.endswith(b"0\r\n\r\nHTTP/1.1 100 Continue\r\n\r\n"), first[-200:]
    assert second.startswith(b"HTTP/1.1 200 ") and b"data: [DONE]" in second


# ---- encodings ------------------------------------------------------------------------------------------------
def test_the_gateway_asks_upstreams_for_identity(upstream: HostileUpstream) -> None:
    with running(config(url(upstream, "ok"))) as (base, _):
        httpx.post(f"{base}/v1/chat/completions", json=CHAT, headers=AUTH, timeout=10)
    assert b"\r\naccept-encoding: identity\r\n" in upstream.heads["ok"].lower()


def test_a_compressed_whole_answer_keeps_its_content_encoding(upstream: HostileUpstream) -> None:
    """The fixture gzips whatever it is asked: the bytes go on as they came, with their Content-Encoding (httpx
    decodes them); a stream can only be passed on event by event, so a compressed one is an error event."""
    with running(config(url(upstream, "gzip"))) as (base, _), httpx.Client(headers=AUTH, timeout=10) as http:
        whole = http.post(f"{base}/v1/chat/completions", json={**CHAT, "stream": False})
        stream = http.post(f"{base}/v1/chat/completions", json=CHAT)
    assert whole.status_code == 200 and whole.headers["content-encoding"] == "gzip"
    assert whole.text.rstrip().endswith("data: [DONE]")  # decoded by the client: the fixture's bytes, whole
    assert stream.status_code == 200 and "content-encoding" not in stream.headers
    assert events(stream.text)[-1]["error"]["type"] == "upstream_encoded"  # type: ignore[index]


# ---- streams that are not whole ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("mode", "kind"),
    [("json200", "upstream_not_sse"), ("partial", "upstream_truncated"), ("nodone", "upstream_truncated")],
)
def test_a_stream_that_is_not_whole_ends_with_an_error_event(upstream: HostileUpstream, mode: str, kind: str) -> None:
    """A 200 JSON to a stream request, a stream whose body ends inside an event, one without data: [DONE]: the
    client gets whole events only, then an error event of the kind, and /metrics counts it."""
    with running(config(url(upstream, mode))) as (base, _), httpx.Client(timeout=10) as http:
        reply = http.post(f"{base}/v1/chat/completions", json=CHAT, headers=AUTH)
        text = http.get(f"{base}/metrics", headers=METRICS).text
    assert reply.status_code == 200 and reply.headers["content-type"] == "text/event-stream"
    parts = reply.text.split("\n\n")
    assert parts[-1] == "" and all(p.startswith("data: ") for p in parts[:-1]), reply.text  # whole events only
    got = events(reply.text)
    assert got[-1]["error"]["type"] == kind, reply.text  # type: ignore[index]
    assert "PARTIAL" not in reply.text  # the partial event was dropped, not passed on
    counted = samples(text, "servelab_gateway_stream_errors_total")
    reason = reply.headers["x-servelab-reason"]
    assert counted == {(("kind", kind), ("reason", reason), ("route", "local")): 1.0}, counted


def test_a_client_that_stops_reading_is_named_the_client(upstream: HostileUpstream) -> None:
    """An endless upstream, a client that never reads: the stream is ended at the idle bound as client_stalled,
    not as the upstream's silence (the upstream was only paused for the client)."""
    cfg = config(url(upstream, "flood"))
    cfg.policy.idle_timeout_s = 1.0
    with running(cfg) as (base, _), socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sock.connect(("127.0.0.1", port(base)))
        sock.sendall(head() + BODY)
        counted: dict[tuple[tuple[str, str], ...], float] = {}
        for _ in range(300):  # until it is counted (bounded for a broken test)
            text = httpx.get(f"{base}/metrics", headers=METRICS, timeout=10).text
            if counted := samples(text, "servelab_gateway_stream_errors_total"):
                break
            time.sleep(0.1)
    assert counted == {(("kind", "client_stalled"), ("reason", "default"), ("route", "local")): 1.0}, counted
    assert not samples(text, "servelab_gateway_idle_timeouts_total"), text


# ---- counting ---------------------------------------------------------------------------------------------------
def test_every_answer_is_counted_under_the_route_and_reason_its_headers_say(upstream: HostileUpstream) -> None:
    """Whole and streamed answers, a 429 passed on, a mid-body failure (502), a failover, no backend (503): the
    requests counter matches, label for label, what the answers' x-servelab-* headers and statuses said."""
    plan = [("ok", None, True), ("ok", None, False), ("busy429", None, False), ("midbody", None, False),
            ("fail500", "ok", True), ("fail500", "fail500", False), ("json200", None, True)]  # fmt: skip
    said: Counter[tuple[tuple[str, str], ...]] = Counter()
    for local, external, stream in plan:
        cfg = config(url(upstream, local), url(upstream, external) if external else None)
        with running(cfg) as (base, _), httpx.Client(timeout=10) as http:
            reply = http.post(f"{base}/v1/chat/completions", json={**CHAT, "stream": stream}, headers=AUTH)
            counted = samples(http.get(f"{base}/metrics", headers=METRICS).text, "servelab_gateway_requests_total")
        labels = (("reason", reply.headers["x-servelab-reason"]), ("route", reply.headers["x-servelab-route"]),
                  ("status", f"{reply.status_code // 100}xx"))  # fmt: skip
        assert counted == {labels: 1.0}, (local, external, stream, counted, labels)
        said[labels] += 1
    assert (("reason", "default"), ("route", "local"), ("status", "5xx")) in said  # the mid-body 502


def test_a_stream_begun_with_keep_alive_comments_is_counted_as_its_head_said(upstream: HostileUpstream) -> None:
    """The upstream stays silent: the stream starts with keep-alive comments (its head says local), then no
    backend answers: one answer counted under local with the head's reason, and its error event by kind."""
    cfg = config(url(upstream, "hang"))
    cfg.policy.keepalive_s, cfg.local.read_timeout_s = 0.2, 1.0
    with running(cfg) as (base, _), httpx.Client(timeout=10) as http:
        reply = http.post(f"{base}/v1/chat/completions", json=CHAT, headers=AUTH)
        text = http.get(f"{base}/metrics", headers=METRICS).text
    assert reply.text.startswith(": keep-alive") and events(reply.text)[-1]["error"]["type"] == "no_backend"
    labels = (("reason", reply.headers["x-servelab-reason"]), ("route", reply.headers["x-servelab-route"]))
    assert samples(text, "servelab_gateway_requests_total") == {(*labels, ("status", "2xx")): 1.0}
    assert samples(text, "servelab_gateway_stream_errors_total") == {(("kind", "no_backend"), *labels): 1.0}
