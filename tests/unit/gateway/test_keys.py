"""The client key: one ring of encoded keys, checked on the head's bytes; a handler takes a request the server's gate
passed as checked, and checks any other itself."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from servelab.gateway.app import Gateway
from servelab.gateway.config import GatewayConfig
from servelab.gateway.keys import KeyRing
from servelab.gateway.messages import Request

KEY_TEXT = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FFF), min_size=1, max_size=12)


@given(keys=st.lists(KEY_TEXT, max_size=4), value=st.binary(max_size=30), pick=st.integers(0, 8))
def test_the_ring_admits_exactly_a_bearer_of_one_of_its_keys(keys: list[str], value: bytes, pick: int) -> None:
    ring = KeyRing(keys)
    if keys and pick < len(keys):  # a real key, with the scheme in any case and spaces around it
        value = b"BeArEr  " + keys[pick].encode() + b" "
    admitted = ring.admits({b"authorization": value})
    scheme, given_key = value[:7].lower(), value[7:].strip()
    assert admitted == (scheme == b"bearer " and given_key in {k.encode() for k in keys} and bool(given_key))
    assert not ring.admits({})


def _gateway() -> Gateway:
    return Gateway(
        GatewayConfig.model_validate({"local": {"url": "http://127.0.0.1:9/v1"}, "keys": {"clients": ["sk-right"]}})
    )


def test_a_request_no_gate_saw_is_checked_by_its_handler() -> None:
    gateway = _gateway()
    wrong = {b"authorization": b"Bearer sk-wrong"}
    assert gateway.client_denied(Request("POST", "/v1/chat/completions", b"", wrong)) is not None
    right = {b"authorization": b"Bearer sk-right"}
    assert gateway.client_denied(Request("POST", "/v1/chat/completions", b"", right)) is None
    # the server sets gated only once its gate passed the head: then the handler does not compare again
    assert gateway.client_denied(Request("POST", "/v1/chat/completions", b"", wrong, gated=True)) is None
