"""The routing order, the flags' hysteresis and lease, the tiered estimate and the SSE relay."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servelab.core.errors import UsageError
from servelab.gateway.config import load_config
from servelab.gateway.policy import Facts, decide
from servelab.gateway.sse import EventRelay
from servelab.gateway.state import Health
from servelab.gateway.store import Settings
from servelab.gateway.store.base import Leases


def facts(tokens: int = 100, *, maintenance=False, healthy=True, realtime=False, inflight=0) -> Facts:  # type: ignore[no-untyped-def]
    return Facts(tokens, maintenance, healthy, realtime, inflight)


@pytest.mark.parametrize(
    ("given", "route", "reason"),
    [
        (facts(), "local", "default"),
        (facts(9000), "external", "long_prefill"),
        (facts(maintenance=True, healthy=False, realtime=True), "external", "maintenance"),  # maintenance first
        (facts(healthy=False, realtime=True), "external", "local_unhealthy"),  # then health
        (facts(9000, realtime=True), "external", "realtime_long_prefill"),
        (facts(3000, realtime=True, inflight=14000), "external", "realtime_prefill_budget"),
        (facts(3000, realtime=True, inflight=1000), "local", "realtime_short"),
        (facts(8000), "local", "default"),  # the threshold itself stays local
    ],
)
def test_policy_order(given: Facts, route: str, reason: str) -> None:
    got = decide(given, threshold=8000, realtime_budget=16000)
    assert (got.route, got.reason) == (route, reason)


def test_flag_holds_and_a_lease_expires() -> None:
    flag, settings = Leases(), Settings(min_hold_s=5.0)
    flag.hold("voice", "me", 30.0, now=0.0, settings=settings)
    flag.held.pop("voice")  # a flap inside the hold time...
    assert flag.on(2.0, 5.0)  # ...is not applied yet
    assert not flag.on(5.0, 5.0)  # and is once the hold has passed
    flag.hold("voice", "me", 40.0, now=10.0, settings=settings)
    flag.hold("voice", "me", 60.0, now=30.0, settings=settings)  # renewed
    assert flag.on(59.0, 5.0)
    assert not flag.on(60.0, 5.0)  # a crashed TTS stops renewing: the lease ends by itself


def test_health_needs_consecutive_results() -> None:
    health = Health()
    health.record(False, 2, 2, "refused")
    assert health.healthy
    health.record(False, 2, 2, "refused")
    assert not health.healthy and health.last_error == "refused"
    health.record(True, 2, 2)
    health.record(False, 2, 2)
    health.record(True, 2, 2)
    assert not health.healthy
    health.record(True, 2, 2)
    assert health.healthy


def test_relay_drops_the_usage_chunk_unless_asked_and_joins_split_events() -> None:
    chunk = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'
    usage = b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1}}\n\n'
    seen: list[dict] = []
    relay = EventRelay(False, seen.append)
    stream = chunk + usage + b"data: [DONE]\n\n"
    out = b"".join(relay.feed(stream[i : i + 7]) for i in range(0, len(stream), 7)) + relay.flush()
    assert out == chunk + b"data: [DONE]\n\n" and seen == [{"prompt_tokens": 5, "completion_tokens": 1}]
    kept = EventRelay(True, seen.append)
    assert kept.feed(usage) == usage


def test_config_errors_name_the_field(tmp_path: Path) -> None:
    path = tmp_path / "g.toml"
    path.write_text('[local]\nurl = "http://127.0.0.1:8000"\n[policy]\nprefill_threshold_tokens = -1\n')
    with pytest.raises(UsageError, match=r"policy\.prefill_threshold_tokens"):
        load_config(path)
    path.write_text("[local\n")
    with pytest.raises(UsageError, match="not valid TOML"):
        load_config(path)
    path.write_text('[local]\nurl = "http://127.0.0.1:8000"\n[external]\nurl = "https://api.example"\nmodel = "m"\n')
    config = load_config(path)
    assert config.policy.prefill_threshold_tokens == 8000 and config.external is not None
    assert json.loads(config.model_dump_json())["keys"] == {"clients": [], "admin": [], "metrics": []}


def test_the_example_config_loads() -> None:
    config = load_config(Path(__file__).parents[3] / "examples" / "gateway.toml")
    assert config.external is not None and config.external.model == "provider-model-name"
    assert config.keys.admin == ["change-me"] and config.state.backend == "memory"


def test_upstream_body_strips_engine_fields_rewrites_the_alias_and_asks_for_usage() -> None:
    from servelab.gateway.config import GatewayConfig, Upstream
    from servelab.gateway.upstream import upstream_body

    config = GatewayConfig(local=Upstream(url="http://l"), external=Upstream(url="http://e", model="vendor-x"))
    body = {"model": "alias", "messages": [], "stream": True, "ignore_eos": True, "min_tokens": 5, "tools": [1],
            "unknown_field": {"kept": True}}  # fmt: skip
    out = upstream_body(body, "external", config)
    assert out["model"] == "vendor-x" and "ignore_eos" not in out and "min_tokens" not in out
    assert out["tools"] == [1] and out["unknown_field"] == {"kept": True}
    assert out["stream_options"] == {"include_usage": True}
    local = upstream_body(body, "local", config)
    assert local["ignore_eos"] is True and local["model"] == "alias" and body.get("stream_options") is None


@pytest.mark.parametrize(
    "raw",
    [
        b'{"model": "m", "messages": [], "stream": true}',
        b'{"model":"m","stream":true,"messages":[{"role":"user","content":"} \\" }"}]}  \n\t',
        b'{"stream": true, "stream_options": {"include_usage": false}, "messages": []}',
        b'{"stream": true, "stream_options": null, "messages": []}',
        b'{"stream": true, "stream_options": {"include_usage": true}, "n": 2}',
        b'{"stream": false, "messages": []}',
        '{"stream": true, "messages": [{"role": "user", "content": "h\u00e9 \u6f22 \U0001f600"}]}'.encode(),
    ],
)
def test_the_bytes_sent_upstream_say_what_the_rewritten_body_says(raw: bytes) -> None:
    """The local stream's usage ask is spliced into the client's own bytes (no re-encoding); whatever path is
    taken, the upstream reads exactly the body upstream_body() describes."""
    from servelab.gateway.body import parse_body
    from servelab.gateway.config import GatewayConfig, Upstream
    from servelab.gateway.upstream import encoded_body, upstream_body

    config = GatewayConfig(local=Upstream(url="http://l"), external=Upstream(url="http://e", model="vendor-x"))
    body = parse_body(raw, 64)
    for route in ("local", "external"):
        assert json.loads(encoded_body(raw, body, route, config)) == upstream_body(body, route, config)


def test_an_event_that_never_ends_is_passed_on_not_held() -> None:
    """An upstream that streams without ever ending an event (10 MiB with no blank line): every byte goes on to
    the client, the relay never holds more than MAX_EVENT_BYTES; events after it are read as before."""
    from servelab.gateway.sse import MAX_EVENT_BYTES

    seen: list[dict[str, int]] = []
    relay = EventRelay(False, seen.append)
    endless = b"data: " + b"x" * (10 * 2**20)
    out, held = [], 0
    for at in range(0, len(endless), 65536):
        out.append(relay.feed(endless[at : at + 65536]))
        held = max(held, len(relay._buffer))
    usage = b'data: {"choices":[],"usage":{"prompt_tokens":3}}\n\n'
    out.append(relay.feed(b"\n\n" + usage))
    assert held <= MAX_EVENT_BYTES
    assert b"".join(out) + relay.flush() == endless + b"\n\n"  # every byte on, the usage-only chunk dropped
    assert seen == [{"prompt_tokens": 3}]
