"""What one client, or many, can hold of a gateway worker: keyless clients are refused on their request head
(their bodies never read), a body must arrive whole within ``body_timeout_s`` however it is paced, connections
are capped by the open-file limit (raised to the hard limit at start) and idle ones give way to new ones, so no
number of idle or keyless connections locks a real client out. Hostile clients are raw sockets (FIXTURES: no
client library trickles a body or opens a thousand idle connections); the upstream is the hostile-peer fixture
in its plain ``ok`` mode."""

from __future__ import annotations

import contextlib
import json
import resource
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import servelab
from servelab.gateway import running
from tests.fixtures.hostile_peers import HostileUpstream, hostile_upstream, url
from tests.unit.gateway.test_hardening import AUTH, CHAT, config

ROOT = Path(__file__).resolve().parents[3]
SRC = Path(servelab.__file__).resolve().parents[1]  # the servelab under test (a child process imports it too)


@pytest.fixture(scope="module")
def upstream() -> Iterator[HostileUpstream]:
    with hostile_upstream() as up:
        yield up


def _port(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


def _read_all(sock: socket.socket) -> bytes:
    """What the server sends until it closes (a timeout fails the test: the server did not close)."""
    out = b""
    while piece := sock.recv(65536):
        out += piece
    return out


HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 1000000\r\n"


@pytest.mark.parametrize("expect", [False, True])
def test_a_keyless_request_is_refused_on_its_head_without_its_body(upstream: HostileUpstream, expect: bool) -> None:
    """The head declares a 1 MB body and none of it is sent: the 401 comes at once (no 100 Continue asked or
    not), and the connection ends (the server half-closes it: the client reads EOF)."""
    with running(config(url(upstream, "ok"))) as (base, _), socket.create_connection(("127.0.0.1", _port(base))) as s:
        s.settimeout(10)
        s.sendall(HEAD + (b"expect: 100-continue\r\n" if expect else b"") + b"\r\n")
        reply = _read_all(s)
    assert reply.startswith(b"HTTP/1.1 401 "), reply[:200]
    assert b"100 Continue" not in reply and b"connection: close" in reply


def test_a_client_library_sending_a_body_anyway_reads_the_401(upstream: HostileUpstream) -> None:
    """httpx sends its whole (2 MiB) body before it reads: what it sends after the refusal is read and dropped,
    so it gets the 401, not a reset."""
    with running(config(url(upstream, "ok"))) as (base, _):
        body = json.dumps({**CHAT, "pad": "x" * (2 << 20)})
        reply = httpx.post(f"{base}/v1/chat/completions", content=body, timeout=10)
    assert reply.status_code == 401


def test_metrics_and_admin_keys_are_checked_on_the_head_too(upstream: HostileUpstream) -> None:
    with running(config(url(upstream, "ok"))) as (base, _):
        for path in (b"/admin/realtime", b"/metrics"):
            with socket.create_connection(("127.0.0.1", _port(base))) as s:
                s.settimeout(10)
                s.sendall(b"POST " + path + b" HTTP/1.1\r\nhost: x\r\ncontent-length: 100000\r\n\r\n")
                assert _read_all(s).startswith(b"HTTP/1.1 401 "), path


def test_a_body_must_arrive_whole_within_the_bound_however_it_is_paced(upstream: HostileUpstream) -> None:
    """A keyed client trickles its body a byte every 0.2 s (each pause far under body_pause_s): at
    body_timeout_s after its head it gets a 408 that says so, not a wait for the whole body."""
    cfg = config(url(upstream, "ok"), body_timeout_s=1.5, body_pause_s=10)
    with running(cfg) as (base, _), socket.create_connection(("127.0.0.1", _port(base))) as s:
        s.settimeout(0.2)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer client-key\r\n"
                  b"content-length: 1000\r\n\r\n")  # fmt: skip
        reply = b""
        for _ in range(500):  # 100 s of trickle at most: the bound ends it long before
            with contextlib.suppress(OSError):
                s.send(b" ")
            with contextlib.suppress(TimeoutError):
                reply += s.recv(65536)
            if b"\r\n\r\n" in reply:
                break
    assert reply.startswith(b"HTTP/1.1 408 ") and b"did not arrive within 1.5 s" in reply, reply[:300]


def test_idle_connections_give_way_to_a_real_client(upstream: HostileUpstream) -> None:
    """max_connections 20, 40 idle connections that never send a byte: a real client is still served (the
    oldest idle one is closed for it)."""
    with running(config(url(upstream, "ok"), max_connections=20)) as (base, _):
        idle = [socket.create_connection(("127.0.0.1", _port(base))) for _ in range(40)]
        try:
            reply = httpx.post(f"{base}/v1/chat/completions", json=CHAT, headers=AUTH, timeout=10)
        finally:
            for sock in idle:
                sock.close()
    assert reply.status_code == 200


def test_the_connection_cap_leaves_room_for_upstreams_and_the_store() -> None:
    from servelab.gateway.slots import RESERVE, connection_cap

    assert connection_cap(10_000, 1024) == (1024 - RESERVE) // 3
    assert connection_cap(10_000, 1 << 20) == 10_000
    assert connection_cap(10_000, 10) == 1


CHILD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, {hard}))
from servelab.gateway import GatewayConfig, running
from servelab.gateway.config import Upstream
config = GatewayConfig(port=0, local=Upstream(url="http://127.0.0.1:9"))
with running(config) as (base, _):
    print(base, resource.getrlimit(resource.RLIMIT_NOFILE)[0], flush=True)
    sys.stdin.read()
"""


@contextlib.contextmanager
def _gateway_process(soft: int, hard: int) -> Iterator[tuple[str, int]]:
    """A gateway in a process of its own, started under an open-file limit of (soft, hard); its URL and its
    soft limit once started."""
    code = CHILD.format(soft=soft, hard=hard)
    env = {"PYTHONPATH": f"{SRC}:{ROOT}", "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    try:
        assert proc.stdout is not None
        base, limit = proc.stdout.readline().decode().split()
        yield base, int(limit)
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_the_open_file_limit_is_raised_to_the_hard_limit() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY or hard < 512:
        pytest.skip("needs a finite hard limit of 512 or more")
    with _gateway_process(256, hard) as (_, soft):
        assert soft == hard


def test_more_idle_connections_than_open_files_do_not_lock_a_client_out() -> None:
    """Under a limit of 256 open files, 300 idle connections: the gateway holds at most its cap (a third of what
    the limit leaves), never meets EMFILE, and serves a real client. It used to take connections until accept()
    failed, and then none more."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1024:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    with _gateway_process(256, 256) as (base, _):
        idle = [socket.create_connection(("127.0.0.1", _port(base))) for _ in range(300)]
        try:
            reply = httpx.get(f"{base}/healthz", timeout=10)
        finally:
            for sock in idle:
                sock.close()
    assert reply.status_code == 200
