"""Pipelining on generated request sequences (hypothesis), against the hostile-peer FIXTURE upstream in its ``ok``
mode (a raw socket client: no client library pipelines). Invariant: answers come back in request order, one
final answer per request, up to and including the first refused one (after which the connection ends); a
100 Continue is only ever sent to the request whose turn it is, never inside or after another's answer."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import httptools
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servelab.gateway import running
from tests.fixtures.hostile_peers import hostile_upstream, url
from tests.unit.gateway.test_hardening import CHAT, config
from tests.unit.gateway.test_protocol import port, read_until


@pytest.fixture(scope="module")
def gateway() -> Iterator[int]:
    with hostile_upstream() as up, running(config(url(up, "ok"))) as (base, _):
        yield port(base)


REQUEST = st.fixed_dictionaries(
    {"key": st.booleans(), "expect": st.booleans(), "stream": st.booleans(), "framing": st.booleans()}
)


def encode(n: int, spec: dict[str, bool]) -> bytes:
    body = json.dumps({**CHAT, "stream": spec["stream"], "user": f"r{n}"}).encode()
    fields = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
    fields += b"authorization: Bearer client-key\r\n" if spec["key"] else b""
    fields += b"expect: 100-continue\r\n" if spec["expect"] else b""
    if spec["framing"]:
        return fields + b"content-length: %d\r\n\r\n%b" % (len(body), body)
    return fields + b"transfer-encoding: chunked\r\n\r\n%x\r\n%b\r\n0\r\n\r\n" % (len(body), body)


class Answers:
    """A stream of HTTP/1.1 responses parsed: each message's status, and how many final ones are complete."""

    def __init__(self, data: bytes) -> None:
        self.statuses: list[int] = []
        self.finals = 0
        self.parser = httptools.HttpResponseParser(self)
        self.parser.feed_data(data)

    def on_headers_complete(self) -> None:
        self.statuses.append(self.parser.get_status_code())

    def on_message_complete(self) -> None:
        self.finals += self.statuses[-1] != 100


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(REQUEST, min_size=1, max_size=4))
def test_pipelined_answers_come_in_order_and_100_only_in_turn(gateway: int, specs: list[dict[str, bool]]) -> None:
    refused = next((i for i, s in enumerate(specs) if not s["key"]), None)
    wanted = [200] * len(specs) if refused is None else [200] * refused + [401]
    with socket.create_connection(("127.0.0.1", gateway)) as sock:
        sock.sendall(b"".join(encode(n, s) for n, s in enumerate(specs)))
        answers = Answers(read_until(sock, lambda d: Answers(d).finals >= len(wanted), limit_s=20))
    finals = [s for s in answers.statuses if s != 100]
    assert finals == wanted, (specs, answers.statuses)
    interims = [i for i, s in enumerate(answers.statuses) if s == 100]
    assert interims in ([], [0]), (specs, answers.statuses)  # only the first request's turn was open for it
    assert not interims or specs[0]["expect"]
