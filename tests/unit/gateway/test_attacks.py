"""Attacks on the gateway's own bounds and protocol handling by someone who has read its code: pipelining
around 100 Continue and refusals, Expect sent twice or by an HTTP/1.0 client, a body at the exact limit, a
refused client that never stops sending, a pipelined request whose turn comes after its body deadline would
have passed. Raw sockets (FIXTURES: no client library pipelines or misuses Expect); the upstream is the
hostile-peer fixture (``ok``, and ``hang`` for an answer that takes long)."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator

import pytest

from servelab.gateway import running
from tests.fixtures.hostile_peers import HostileUpstream, hostile_upstream, url
from tests.unit.gateway.test_hardening import config
from tests.unit.gateway.test_protocol import BODY, head, port, read_until


@pytest.fixture(scope="module")
def upstream() -> Iterator[HostileUpstream]:
    with hostile_upstream() as up:
        yield up


def closed(data: bytes) -> bool:
    return False  # read until the server closes


def test_expect_twice_gets_one_100(upstream: HostileUpstream) -> None:
    with running(config(url(upstream, "ok"))) as (base, _), socket.create_connection(("127.0.0.1", port(base))) as s:
        s.sendall(head(b"expect: 100-continue", b"Expect: 100-Continue", b"connection: close"))
        got = read_until(s, lambda d: b"100 Continue\r\n\r\n" in d)
        s.sendall(BODY)
        got += read_until(s, closed)
    assert got.count(b"100 Continue") == 1 and b"HTTP/1.1 200 " in got


def test_a_pipelined_body_sent_without_waiting_gets_no_late_100(upstream: HostileUpstream) -> None:
    """The second request expects 100 Continue but sends its body at once: its 100 is owed to nobody, and none
    goes out after the first answer (where the client would read it as the start of its own answer)."""
    with running(config(url(upstream, "ok"))) as (base, _), socket.create_connection(("127.0.0.1", port(base))) as s:
        s.sendall(head() + BODY + head(b"expect: 100-continue", b"connection: close") + BODY)
        got = read_until(s, closed)
    assert got.count(b"HTTP/1.1 200 ") == 2 and b"100 Continue" not in got, got


def test_an_http10_expect_gets_no_100(upstream: HostileUpstream) -> None:
    with running(config(url(upstream, "ok"))) as (base, _), socket.create_connection(("127.0.0.1", port(base))) as s:
        s.sendall(head(b"expect: 100-continue").replace(b"HTTP/1.1", b"HTTP/1.0") + BODY)
        got = read_until(s, closed)
    assert got.startswith(b"HTTP/1.1 200 ") and b"100 Continue" not in got


@pytest.mark.parametrize(
    ("second", "status"),
    [
        (head(b"transfer-encoding: chunked"), b"400"),  # ambiguous framing
        (head().replace(b"authorization: Bearer client-key\r\n", b""), b"401"),  # no key
        (head(length=10**9), b"413"),  # over the body limit
    ],
)
def test_a_pipelined_refusal_comes_after_the_answer_before_it(
    upstream: HostileUpstream, second: bytes, status: bytes
) -> None:
    """A good stream request and a refused one in the same write: the first is answered whole, then the
    refusal, then the connection ends (a refusal used to close the connection under the first answer)."""
    with running(config(url(upstream, "ok"))) as (base, _), socket.create_connection(("127.0.0.1", port(base))) as s:
        s.sendall(head() + BODY + second)
        got = read_until(s, closed)
    assert got.startswith(b"HTTP/1.1 200 ") and b"data: [DONE]" in got, got[:300]
    end = got.index(b"0\r\n\r\n") + 5
    assert got[end:].startswith(b"HTTP/1.1 " + status + b" "), got[end - 20 :]


@pytest.mark.parametrize(("extra", "refused"), [(0, False), (1, True)])
def test_a_body_at_the_limit_is_taken_one_byte_over_is_not(
    upstream: HostileUpstream, extra: int, refused: bool
) -> None:
    cfg = config(url(upstream, "ok"))
    cfg.max_body_bytes = 1024
    body = json.dumps({**json.loads(BODY), "pad": ""}).encode()
    body = body[:-2] + b"x" * (1024 - len(body) + extra) + b'"}'
    assert len(body) == 1024 + extra
    with running(cfg) as (base, _):
        for framing in ("length", "chunked"):
            with socket.create_connection(("127.0.0.1", port(base))) as s:
                if framing == "length":
                    s.sendall(head(b"connection: close", length=len(body)) + body)
                else:
                    chunked = head(b"transfer-encoding: chunked", b"connection: close").replace(
                        b"content-length: %d\r\n" % len(BODY), b""
                    )
                    s.sendall(chunked + b"%x\r\n%b\r\n0\r\n\r\n" % (len(body), body))
                got = read_until(s, closed)
            assert got.startswith(b"HTTP/1.1 413 " if refused else b"HTTP/1.1 200 "), (framing, got[:200])


def test_a_refused_client_that_never_stops_sending_is_let_go(upstream: HostileUpstream) -> None:
    """Refused on its head, the client keeps sending: what it sends is dropped, and past header_timeout_s the
    connection is reset (it holds no slot and no buffer for long)."""
    with running(config(url(upstream, "ok"), header_timeout_s=1)) as (base, _):
        with socket.create_connection(("127.0.0.1", port(base))) as s:
            s.sendall(head(length=10**8).replace(b"authorization: Bearer client-key\r\n", b""))
            began, ended = time.monotonic(), False
            while time.monotonic() - began < 30 and not ended:  # a bound for a broken test, not a margin
                try:
                    s.sendall(b"x" * 65536)
                except OSError:
                    ended = True
                time.sleep(0.01)
        assert ended, "the gateway still takes bytes from a refused client"


def test_a_pipelined_expect_waiting_its_turn_is_not_timed_out(upstream: HostileUpstream) -> None:
    """The first answer takes 2 s (the upstream hangs to its read timeout); the second request waits for its
    100 Continue all that time, four times its body bound: its body's clock starts with the 100, so it is
    answered, not cut off with a 408."""
    cfg = config(url(upstream, "hang"), body_timeout_s=0.5, body_pause_s=0.5)
    cfg.local.read_timeout_s = 2
    with running(cfg) as (base, _), socket.create_connection(("127.0.0.1", port(base))) as s:
        s.sendall(head() + BODY + head(b"expect: 100-continue", b"connection: close"))
        got = read_until(s, lambda d: b"HTTP/1.1 100 Continue\r\n\r\n" in d or b" 408 " in d)
        with contextlib.suppress(OSError):
            s.sendall(BODY)
        got += read_until(s, closed)
    first, _, rest = got.partition(b"HTTP/1.1 100 Continue\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 503 ") and b" 408 " not in got, got[:400]
    assert rest.startswith(b"HTTP/1.1 503 "), rest[:200]  # answered (the hanging upstream again)


def test_a_head_trickled_after_an_answer_gives_way_like_an_idle_connection(upstream: HostileUpstream) -> None:
    """One slot: a client is answered and then starts its next head and never ends it. Holding no request, it
    gives way to a new client (it used to count as busy once it had been answered)."""
    cfg = config(url(upstream, "ok"), max_connections=1)
    with running(cfg) as (base, _), socket.create_connection(("127.0.0.1", port(base))) as s:
        s.sendall(head() + BODY + b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n")
        assert read_until(s, lambda d: d.endswith(b"0\r\n\r\n")).startswith(b"HTTP/1.1 200 ")
        with socket.create_connection(("127.0.0.1", port(base))) as real:
            real.sendall(head(b"connection: close") + BODY)
            got = read_until(real, closed)
    assert got.startswith(b"HTTP/1.1 200 "), got[:200]
