"""2,100 fuzzed requests through the gateway, none answered with a 5xx: 1,500 bodies (OpenAI-shaped with wrong
types anywhere, any JSON, raw bytes, deep nesting, NaN/Infinity, huge numbers, lone surrogates) and 600 sets of
headers sent on a raw socket (random names and values, repeated and conflicting framing and auth fields). The
upstream is the fast fixture in tests/fixtures/hostile_peers.py (a 200 stream for anything), so every 5xx would
be the gateway's own; the real-engine fuzz is tests/integration/test_gateway_fuzz.py."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servelab.gateway import running
from tests.fixtures.fuzz_strategies import RAW
from tests.fixtures.hostile_peers import after_interim, hostile_upstream, raw_exchange, url
from tests.unit.gateway.test_hardening import config

CHECKS = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large]


@pytest.fixture(scope="module")
def gateway() -> Iterator[tuple[str, int]]:
    with (
        hostile_upstream() as up,
        running(config(url(up, "ok"), body_timeout_s=0.5, header_timeout_s=2)) as (
            base,
            _,
        ),
    ):
        yield base, int(base.rsplit(":", 1)[1])


@settings(max_examples=1500, deadline=None, suppress_health_check=CHECKS)
@given(raw=RAW, path=st.sampled_from(["/v1/chat/completions", "/v1/completions"]), key=st.booleans())
def test_fuzzed_bodies_get_no_5xx(gateway: tuple[str, int], raw: bytes, path: str, key: bool) -> None:
    headers = {"authorization": "Bearer client-key"} if key else {}
    reply = httpx.post(gateway[0] + path, content=raw, headers={**headers, "content-type": "application/json"},
                       timeout=30)  # fmt: skip
    assert reply.status_code < 500, (reply.status_code, reply.text[:300])


NAME = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-_0123456789!#$%&'*+.^`|~", min_size=1, max_size=20)
VALUE = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"),
                max_size=60).map(lambda v: v.encode("latin-1"))  # fmt: skip
KNOWN = st.sampled_from([b"content-length", b"transfer-encoding", b"authorization", b"host", b"connection",
                         b"expect", b"content-type", b"upgrade", b"te", b"x-forwarded-for"])  # fmt: skip
SPECIAL = st.sampled_from([b"chunked", b"0", b"-1", b"99999999999999999999", b"close", b"Bearer ",
                           b"Bearer client-key", b"100-continue", b"h2c"])  # fmt: skip
FIELD = st.tuples(st.one_of(KNOWN, NAME.map(str.encode)), st.one_of(VALUE, SPECIAL))


@settings(max_examples=600, deadline=None, suppress_health_check=CHECKS)
@given(
    fields=st.lists(FIELD, max_size=12),
    method=st.sampled_from([b"POST", b"GET", b"PUT", b"OPTIONS", b"BREW"]),
    path=st.sampled_from([b"/v1/chat/completions", b"/v1/models", b"/admin/realtime", b"/metrics", b"/x"]),
)
def test_fuzzed_headers_get_no_5xx(gateway: tuple[str, int], fields: list[tuple[bytes, bytes]], method: bytes,
                                   path: bytes) -> None:  # fmt: skip
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    head = b"".join(name + b": " + value + b"\r\n" for name, value in fields)
    request = method + b" " + path + b" HTTP/1.1\r\n" + head + b"content-length: %d\r\n\r\n" % len(body) + body
    reply = after_interim(raw_exchange(gateway[1], request, timeout=10))  # the final answer, past a 100 Continue
    if reply:  # a closed connection with no answer is allowed for framing the server refused to read
        status = int(reply.split(b" ", 2)[1])
        assert status < 500, reply[:300]
