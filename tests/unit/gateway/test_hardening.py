"""The gateway against hostile clients and upstreams (tests/fixtures/hostile_peers.py: fixtures, because no real
engine answers every request with 429 on demand or hangs before its head, and no client library trickles
headers). Every bad input is a 4xx with a reason, never a 5xx; slow or oversized clients are cut off; keys,
admin bodies and upstream answers are handled as the config says. The real-engine cases (a hang-up during the
keep-alive phase of a long prefill) are in tests/integration/test_gateway_hangup.py."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from servelab.core.errors import UsageError
from servelab.gateway import GatewayConfig, running
from servelab.gateway.config import Keys, Policy, Server, Upstream, load_config
from tests.fixtures.hostile_peers import (
    FLOOD_EVENTS,
    HostileUpstream,
    hostile_upstream,
    raw_exchange,
    slowloris,
    tokenizer_folder,
    url,
)

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


@pytest.fixture(scope="module")
def upstream() -> Iterator[HostileUpstream]:
    with hostile_upstream() as up:
        yield up


def config(local: str, external: str | None = None, **server: float) -> GatewayConfig:
    return GatewayConfig(
        port=0,
        local=Upstream(
            url=local, health_path="/v1/models", tokenizer=tokenizer_folder(), connect_timeout_s=2, read_timeout_s=5
        ),
        external=Upstream(url=external, connect_timeout_s=2, read_timeout_s=5) if external else None,
        policy=Policy(health_interval_s=30, keepalive_s=0),
        keys=Keys(clients=["client-key"], admin=["admin-key"], metrics=["metrics-key"]),
        server=Server(**server),  # type: ignore[arg-type]
    )


AUTH = {"authorization": "Bearer client-key"}
HOSTILE_BODIES = {
    "nested arrays x600": b'{"messages": ' + b"[" * 600 + b"]" * 600 + b"}",
    "nested arrays x5000": b"[" * 5000 + b"]" * 5000,
    "nested objects x1000": b'{"a":' * 1000 + b"1" + b"}" * 1000,
    "nested in a message": b'{"messages": [{"role": "user", "content": ' + b"[" * 300 + b"]" * 300 + b"}]}",
    "NaN": b'{"model": "m", "temperature": NaN, "messages": []}',
    "Infinity": b'{"model": "m", "max_tokens": Infinity, "messages": []}',
    "-Infinity": b'{"model": "m", "top_p": -Infinity, "messages": []}',
    "1e999": b'{"model": "m", "temperature": 1e999, "messages": []}',
    "-1e999": b'{"model": "m", "temperature": -1e999, "messages": []}',
    "lone surrogate in content": b'{"messages": [{"role": "user", "content": "\\ud800"}]}',
    "lone low surrogate in content": b'{"messages": [{"role": "user", "content": "x\\udfff"}]}',
    "lone surrogate in the model alias": b'{"model": "\\udbff", "messages": []}',
    "invalid UTF-8": b'{"model": "\xff\xfe", "messages": []}',
    "model not a string": b'{"model": ["m"], "messages": []}',
    "stream not a boolean": b'{"model": "m", "stream": "yes", "messages": []}',
    "messages not a list": b'{"model": "m", "messages": {"role": "user"}}',
    "stream_options not an object": b'{"model": "m", "stream_options": 3, "messages": []}',
    "not an object": b"[1, 2, 3]",
    "empty": b"",
    "truncated": b'{"model": "m", "messa',
}


@pytest.mark.parametrize("name", sorted(HOSTILE_BODIES))
def test_a_hostile_body_is_a_4xx_with_a_reason(upstream: HostileUpstream, name: str) -> None:
    with running(config(url(upstream, "ok"))) as (base, _):
        reply = httpx.post(f"{base}/v1/chat/completions", content=HOSTILE_BODIES[name], headers=AUTH, timeout=10)
    assert reply.status_code == 400, (reply.status_code, reply.text)
    assert reply.json()["error"]["type"] == "invalid_request_error" and reply.json()["error"]["message"]


def test_empty_or_whitespace_keys_are_refused_by_the_config(tmp_path: Path) -> None:
    path = tmp_path / "g.toml"
    for keys in ('clients = [""]', 'admin = ["\\t"]', 'admin = ["ok-key", " "]', 'metrics = ["a b"]'):
        path.write_text(f'[local]\nurl = "http://127.0.0.1:1"\n[keys]\n{keys}\n')
        with pytest.raises(UsageError, match="keys"):
            load_config(path)


def test_infinite_or_nan_numbers_in_the_config_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "g.toml"
    for line in ("[policy]\nrealtime_ttl_s = inf", "[policy]\nidle_timeout_s = nan", "[server]\nheader_timeout_s = inf",
                 "[local]\nurl = \"http://127.0.0.1:1\"\nread_timeout_s = inf"):  # fmt: skip
        local = "" if line.startswith("[local]") else '[local]\nurl = "http://127.0.0.1:1"\n'
        path.write_text(local + line + "\n")
        with pytest.raises(UsageError, match="finite"):
            load_config(path)


def test_a_blank_bearer_never_matches(upstream: HostileUpstream) -> None:
    """Raw requests: a client library would refuse to send some of these header values."""
    with running(config(url(upstream, "ok"))) as (base, _):
        port = int(base.rsplit(":", 1)[1])
        body = json.dumps(CHAT).encode()
        for value in (b"Bearer \t", b"Bearer ", b"Bearer", b"bearer  ", b"Basic client-key", b"Bearer client-key2"):
            for method, path, data in (("POST", "/v1/chat/completions", body), ("GET", "/admin/state", b"")):
                request = (f"{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-length: {len(data)}\r\n".encode()
                           + b"authorization: " + value + b"\r\nconnection: close\r\n\r\n" + data)  # fmt: skip
                assert raw_exchange(port, request).startswith(b"HTTP/1.1 401"), (value, path)
        assert httpx.post(f"{base}/v1/chat/completions", json=CHAT, headers=AUTH, timeout=10).status_code == 200


@pytest.mark.parametrize(
    "body",
    [{"active": "false"}, {"active": 1}, {"active": None}, {"active": True, "ttl_s": 0},
     {"active": True, "ttl_s": -5}, {"active": True, "ttl_s": "nan"}, {"active": True, "ttl_s": 10**9},
     {"active": True, "extra": 1}, {}, [True]],
)  # fmt: skip
def test_admin_bodies_are_typed(upstream: HostileUpstream, body: object) -> None:
    admin = {"authorization": "Bearer admin-key"}
    with running(config(url(upstream, "ok"))) as (base, _), httpx.Client(base_url=base, timeout=10) as http:
        reply = http.post("/admin/realtime", json=body, headers=admin)
        assert reply.status_code == 400, reply.text
        for raw in (b'{"active": true, "ttl_s": NaN}', b'{"active": true, "ttl_s": Infinity}', b"not json"):
            assert http.post("/admin/realtime", content=raw, headers=admin).status_code == 400
        assert http.get("/admin/state", headers=admin).json()["realtime"] is False  # nothing pinned it on
        assert http.post("/admin/realtime", json={"active": True, "ttl_s": 0.5}, headers=admin).json()["realtime"]


def test_an_upstream_429_keeps_its_retry_after(upstream: HostileUpstream) -> None:
    with running(config(url(upstream, "busy429"))) as (base, _):
        reply = httpx.post(f"{base}/v1/chat/completions", json=CHAT, headers=AUTH, timeout=10)
    assert reply.status_code == 429 and reply.headers["retry-after"] == "7"


def test_the_openai_client_does_not_multiply_upstream_attempts(upstream: HostileUpstream) -> None:
    """Local and external both fail: the gateway tries each once and says x-should-retry: false, so the
    official client (2 retries by default) sends one request, not three."""
    before = dict(upstream.seen)
    with running(config(url(upstream, "fail500"), url(upstream, "fail500"))) as (base, _):
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="client-key", max_retries=2)
        with pytest.raises(openai.APIStatusError) as caught:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.status_code == 503
    assert caught.value.response.headers["x-should-retry"] == "false"
    assert upstream.seen["fail500"] - before.get("fail500", 0) == 2  # local, then the one failover


def test_an_external_401_is_the_gateways_problem_not_the_clients(upstream: HostileUpstream) -> None:
    """Local is down, the external API refuses the gateway's own key: the client (whose key is good) gets a 502
    that says so, not an authentication error of its own."""
    with running(config("http://127.0.0.1:9", url(upstream, "auth401"))) as (base, _):
        reply = httpx.post(f"{base}/v1/chat/completions", json=CHAT, headers=AUTH, timeout=10)
    assert reply.status_code == 502 and reply.json()["error"]["type"] == "upstream_auth_error"
    assert reply.headers["x-should-retry"] == "false"


@pytest.mark.parametrize("mode", ["garbage", "hang"])
def test_a_garbage_or_silent_upstream_is_a_503_never_a_500(upstream: HostileUpstream, mode: str) -> None:
    cfg = config(url(upstream, mode))
    cfg.local.read_timeout_s = 1
    with running(cfg) as (base, _):
        reply = httpx.post(f"{base}/v1/chat/completions", json=CHAT, headers=AUTH, timeout=20)
    assert reply.status_code == 503 and reply.json()["error"]["type"] == "no_backend", reply.text


@pytest.mark.parametrize(
    ("mode", "stream"),
    [("stray", True), ("stray", False), ("straylater", True), ("straywhole", True), ("straywhole", False)],
)
def test_bytes_after_an_upstream_answer_never_answer_the_next_request(
    upstream: HostileUpstream, mode: str, stream: bool
) -> None:
    """A hostile upstream FIXTURE that follows each answer with an unasked one: its head in the same read or while
    the connection sits in the pool, its body after the next request on that connection (a gateway that reused
    the connection would hand that body to the next client as its answer); or whole, in the same write (a gateway
    that passed it on would add it to this answer, or write it after this answer's end, where the client's
    keep-alive connection reads it as the start of its next answer). Every request, on one client connection,
    gets its own answer and nothing else."""
    replies = []
    with running(config(url(upstream, mode))) as (base, _), httpx.Client(headers=AUTH, timeout=10) as client:
        for _ in range(4):
            replies.append(client.post(f"{base}/v1/chat/completions", json={**CHAT, "stream": stream}))
            time.sleep(0.4)  # the unasked head arrives while the connection is idle (straylater)
    for reply in replies:
        assert reply.status_code == 200 and "SMUGGLED" not in reply.text, reply.text
        assert '"content":"ok"' in reply.text


@pytest.mark.parametrize("stream", [True, False])
def test_an_upstream_that_stalls_mid_body_does_not_hold_the_client(upstream: HostileUpstream, stream: bool) -> None:
    """A hostile upstream FIXTURE that answers 200, sends the first bytes of its body and then nothing while
    keeping the connection open: a whole answer is a 504 at the idle bound, a stream ends in band with an
    upstream_idle event; both counted, and the gateway serves the next request."""
    cfg = config(url(upstream, "stallbody"))
    cfg.policy.idle_timeout_s = 0.5
    with running(cfg) as (base, _):
        began = time.monotonic()
        reply = httpx.post(f"{base}/v1/chat/completions", json={**CHAT, "stream": stream}, headers=AUTH, timeout=20)
        took = time.monotonic() - began
        metrics = httpx.get(f"{base}/metrics", headers={"authorization": "Bearer metrics-key"}).text
        health = httpx.get(f"{base}/healthz", timeout=5)
    assert took < 5, took  # the idle bound, not the upstream's hour
    if stream:
        assert reply.status_code == 200 and '"upstream_idle"' in reply.text, reply.text
    else:
        assert reply.status_code == 504 and reply.json()["error"]["type"] == "upstream_idle", reply.text
    assert 'servelab_gateway_idle_timeouts_total{route="local"} 1.0' in metrics
    assert health.status_code == 200


@pytest.mark.parametrize("stream", [True, False])
def test_an_upstream_head_that_never_ends_is_cut_off(upstream: HostileUpstream, stream: bool) -> None:
    """A hostile upstream FIXTURE that answers 200 and then header lines without end (64 MiB if taken): the
    gateway stops reading at its head limit and answers 503 with why, well before the read timeout, holding no
    more than the limit; the next request is served."""
    before = upstream.seen["headflood_bytes"]
    with running(config(url(upstream, "headflood"))) as (base, _):
        reply = httpx.post(f"{base}/v1/chat/completions", json={**CHAT, "stream": stream}, headers=AUTH, timeout=20)
    taken = upstream.seen["headflood_bytes"] - before
    assert reply.status_code == 503 and "response head over" in reply.json()["error"]["message"], reply.text
    assert taken < 16 * 2**20  # what the upstream got written before the gateway let go (socket buffers included)


def test_interim_answers_before_the_upstreams_own_are_skipped(upstream: HostileUpstream) -> None:
    """A hostile upstream FIXTURE that sends 100 Continue and 103 Early Hints before each answer (a CDN in front
    of an API does): streams and whole answers come through, and the pooled connection serves the next ones."""
    with running(config(url(upstream, "interim"))) as (base, _), httpx.Client(base_url=base, timeout=10) as http:
        replies = [http.post("/v1/chat/completions", json={**CHAT, "stream": i % 2 == 0}, headers=AUTH)
                   for i in range(6)]  # fmt: skip
    assert [r.status_code for r in replies] == [200] * 6, [r.text[:200] for r in replies]
    assert all(r.text.rstrip().endswith("data: [DONE]") for r in replies[::2])
    assert all("link" not in r.headers for r in replies)


def test_a_body_ended_by_the_upstreams_close_is_a_whole_answer(upstream: HostileUpstream) -> None:
    """A FIXTURE upstream that frames its body by closing the connection (no length, no chunks: HTTP/1.0 style):
    the close is the answer's end, not a failure (it used to be an upstream_disconnect event or a 502)."""
    with running(config(url(upstream, "untilclose"))) as (base, _), httpx.Client(base_url=base, timeout=10) as http:
        streamed = http.post("/v1/chat/completions", json=CHAT, headers=AUTH)
        whole = http.post("/v1/chat/completions", json={**CHAT, "stream": False}, headers=AUTH)
    assert streamed.status_code == 200 and streamed.text.rstrip().endswith("data: [DONE]")
    assert "upstream_disconnect" not in streamed.text
    assert whole.status_code == 200 and whole.text.rstrip().endswith("data: [DONE]")


def test_slowloris_connections_are_cut_off(upstream: HostileUpstream) -> None:
    with running(config(url(upstream, "ok"), header_timeout_s=1.5)) as (base, _):
        port = int(base.rsplit(":", 1)[1])
        closed = slowloris(port, connections=200, seconds=4)
        assert all(closed), f"{closed.count(False)} of 200 slow connections still held"
        assert httpx.post(f"{base}/v1/chat/completions", json=CHAT, headers=AUTH, timeout=10).status_code == 200


def test_header_limits(upstream: HostileUpstream) -> None:
    with running(config(url(upstream, "ok"))) as (base, _):
        port = int(base.rsplit(":", 1)[1])
        big = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * (8 << 20) + b"\r\n\r\n"
        assert raw_exchange(port, big).startswith(b"HTTP/1.1 431")
        many = b"GET /healthz HTTP/1.1\r\n" + b"".join(b"x-h%d: v\r\n" % i for i in range(20_000)) + b"\r\n"
        assert raw_exchange(port, many).startswith(b"HTTP/1.1 431")
        smuggle = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 4\r\n"
                   b"transfer-encoding: chunked\r\n\r\n0\r\n\r\n")  # fmt: skip
        assert raw_exchange(port, smuggle).startswith(b"HTTP/1.1 400")
        assert raw_exchange(port, b"\x16\x03\x01 not http\r\n\r\n").startswith(b"HTTP/1.1 400")


def test_stalled_bodies_and_idle_connections_are_closed(upstream: HostileUpstream) -> None:
    with running(config(url(upstream, "ok"), body_timeout_s=1, keepalive_s=1)) as (base, _):
        port = int(base.rsplit(":", 1)[1])
        start = time.monotonic()
        stalled = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer client-key\r\n"
                   b"content-length: 100\r\n\r\n{")  # fmt: skip  # with its key: a keyless one is refused at its head
        assert raw_exchange(port, stalled, timeout=10).startswith(b"HTTP/1.1 408")
        assert time.monotonic() - start < 5
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
            start = time.monotonic()
            assert sock.recv(65536) == b""  # closed by the server once idle
            assert time.monotonic() - start < 5


def test_no_redirects_and_no_reflected_host(upstream: HostileUpstream) -> None:
    with running(config(url(upstream, "ok"))) as (base, _):
        for path in ("/v1/chat/completions/", "/v1/models/", "/admin", "//evil.example/x"):
            reply = httpx.post(f"{base}{path}", json=CHAT, headers={**AUTH, "host": "evil.example"}, timeout=10)
            assert reply.status_code in (404, 405) and "location" not in reply.headers
            assert "evil.example" not in reply.text and "evil.example" not in str(reply.headers)


def test_metrics_and_readyz_want_a_key_once_configured(upstream: HostileUpstream) -> None:
    with running(config(url(upstream, "ok"))) as (base, _), httpx.Client(base_url=base, timeout=10) as http:
        assert http.get("/metrics").status_code == 401 and http.get("/readyz").status_code == 401
        assert http.get("/metrics", headers={"authorization": "Bearer client-key"}).status_code == 401
        ok = http.get("/metrics", headers={"authorization": "Bearer metrics-key"})
        assert ok.status_code == 200 and "servelab_gateway_requests_total" in ok.text
        assert http.get("/readyz", headers={"authorization": "Bearer admin-key"}).status_code == 200
        assert http.get("/healthz").status_code == 200


def test_a_pooled_connection_is_reused_and_the_count_stays_bounded(upstream: HostileUpstream) -> None:
    with running(config(url(upstream, "ok"))) as (base, gateway), httpx.Client(base_url=base, timeout=10) as http:
        for _ in range(50):
            assert http.post("/v1/chat/completions", json=CHAT, headers=AUTH).status_code == 200
        assert len(gateway.clients["local"]._idle) == 1  # one connection served all 50 in turn
        stats = json.loads(httpx.get(f"http://127.0.0.1:{upstream.port}/stats").text)
        assert stats["ok"] >= 50


def test_expect_100_continue_and_an_http10_client(upstream: HostileUpstream) -> None:
    """curl sends `Expect: 100-continue` for larger bodies and waits for the interim answer; an HTTP/1.0 client
    cannot read chunked encoding, so its stream ends with the connection."""
    with running(config(url(upstream, "ok"))) as (base, _):
        port = int(base.rsplit(":", 1)[1])
        body = json.dumps(CHAT).encode()
        head = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer client-key\r\n"
                b"expect: 100-continue\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(body))  # fmt: skip
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(head)
            assert sock.recv(1024).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
            sock.sendall(body)
            reply = b""
            while piece := sock.recv(65536):
                reply += piece
        assert reply.startswith(b"HTTP/1.1 200") and b"data: [DONE]" in reply
        old = (b"POST /v1/chat/completions HTTP/1.0\r\nauthorization: Bearer client-key\r\n"
               b"content-length: %d\r\n\r\n" % len(body)) + body  # fmt: skip
        reply = raw_exchange(port, old)
        assert reply.startswith(b"HTTP/1.1 200") and b"transfer-encoding" not in reply.lower()
        assert reply.rstrip().endswith(b"data: [DONE]")


def test_a_client_that_stops_reading_stops_the_upstream_read(upstream: HostileUpstream) -> None:
    """The relay writes each upstream read straight to the client; when the client's socket is full, the gateway
    must stop reading the upstream (not buffer the whole stream for it), and go on when the client drains."""
    with running(config(url(upstream, "flood"))) as (base, _):
        port = int(base.rsplit(":", 1)[1])
        body = json.dumps(CHAT).encode()
        head = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer client-key\r\n"
                b"content-length: %d\r\n\r\n" % len(body))  # fmt: skip
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)  # before connecting: no autotuning
            sock.settimeout(30)
            sock.connect(("127.0.0.1", port))
            sock.sendall(head + body)
            time.sleep(2)  # not reading
            earlier = json.loads(httpx.get(f"http://127.0.0.1:{upstream.port}/stats").text)["flood_bytes"]
            time.sleep(1)
            taken = json.loads(httpx.get(f"http://127.0.0.1:{upstream.port}/stats").text)["flood_bytes"]
            reply = bytearray()
            while not reply.endswith(b"0\r\n\r\n") and (piece := sock.recv(1 << 20)):
                reply += piece
    sent = FLOOD_EVENTS * 1024
    assert taken < sent / 2, f"the gateway took {taken} of {sent} bytes from the upstream for a client not reading"
    assert taken - earlier < 2**20, f"the gateway went on reading the upstream: {earlier} then {taken} bytes"
    assert reply.count(b"data: {") == FLOOD_EVENTS and b"data: [DONE]" in reply


def _server_side_open(server_port: int, client_port: int) -> bool:
    """Whether the server's end of a loopback TCP connection still exists (/proc/net/tcp: local, remote in hex)."""
    rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
    ends = (f":{server_port:04X}", f":{client_port:04X}")
    return any(row.split()[1].endswith(ends[0]) and row.split()[2].endswith(ends[1]) for row in rows)


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads the kernel's socket table")
def test_a_client_that_never_reads_is_let_go(upstream: HostileUpstream) -> None:
    """A hostile client FIXTURE (a raw socket) asks for a stream and never reads: the gateway stops reading the
    endless upstream, ends it at the idle bound, and does not keep the connection (nor what it could not send)
    past its keep-alive bound once it has closed it: a client that does not read holds nothing for long."""
    cfg = config(url(upstream, "flood"), keepalive_s=0.5)
    cfg.policy.idle_timeout_s = 0.5
    with running(cfg) as (base, _):
        port = int(base.rsplit(":", 1)[1])
        body = json.dumps(CHAT).encode()
        head = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer client-key\r\n"
                b"content-length: %d\r\n\r\n" % len(body))  # fmt: skip
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
            sock.connect(("127.0.0.1", port))
            sock.sendall(head + body)
            mine = sock.getsockname()[1]
            time.sleep(0.3)
            assert _server_side_open(port, mine)
            deadline = time.monotonic() + 10
            while _server_side_open(port, mine) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not _server_side_open(port, mine), "the gateway still holds a connection whose client never reads"


@pytest.mark.parametrize(("timeout_s", "healthy"), [(2.0, True), (0.1, False)])
def test_a_slow_health_answer_is_not_a_down_engine(upstream: HostileUpstream, timeout_s: float, healthy: bool) -> None:
    """A busy engine answers /health late: checked every 0.2 s, it stays healthy while its answers come within
    health_timeout_s (0.5 s here against the default 2 s), and goes unhealthy past a timeout it cannot meet."""
    cfg = config(url(upstream, "slowhealth"))
    cfg = cfg.model_copy(update={"policy": cfg.policy.model_copy(
        update={"health_interval_s": 0.2, "health_timeout_s": timeout_s})})  # fmt: skip
    with running(cfg) as (_, gateway):
        time.sleep(2.5)
        assert gateway.health.healthy is healthy, gateway.health.last_error


def test_nothing_goes_out_after_a_streams_end() -> None:
    """An outlet writes nothing after the body's end (a chunk there would be read by a keep-alive client as the
    start of its next answer), whoever calls it."""
    from servelab.gateway.outlet import Outlet

    class Wire:
        def __init__(self) -> None:
            self.data = b""

        def write(self, data: bytes) -> None:
            self.data += data

    class Line:
        closed = False
        loop = None

        def __init__(self) -> None:
            self.transport = Wire()

        def head(self, status: int, content_type: str, headers: list[tuple[str, str]], framing: str) -> bytes:
            return b"HEAD\r\n\r\n"

    line = Line()
    outlet = Outlet(line, http10=False)  # type: ignore[arg-type]
    outlet.prepare(200, [])
    assert outlet.send(b"data: 1\n\n")
    outlet.end()
    sent = line.transport.data
    assert sent.endswith(b"0\r\n\r\n")
    assert outlet.send(b"data: stray\n\n")
    outlet.end()
    assert line.transport.data == sent
