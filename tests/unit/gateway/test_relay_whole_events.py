"""The relay's invariant, on generated streams (hypothesis): whatever the reads' boundaries, the client gets
exactly the upstream's whole events (the usage-only chunk dropped unless asked), never a partial one; the stream
ends clean only when its last event was data: [DONE] and nothing was left over, else with one error event."""

from __future__ import annotations

import itertools
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.gateway.sse import TRUNCATED, EventRelay

CONTENT = st.text(max_size=40).map(
    lambda t: b"data: " + json.dumps({"choices": [{"delta": {"content": t}}]}).encode() + b"\n\n"
)
USAGE = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}\n\n'
COMMENT = b": keep-alive\n\n"
DONE = b"data: [DONE]\n\n"
PARTIAL = b'data: {"PARTIAL":{"choices":[{"delta":{"content":"never whole"}}]}}\n\n'


@st.composite
def streams(draw: st.DrawFn) -> tuple[list[bytes], bool, bytes, list[int]]:
    events = draw(st.lists(st.one_of(CONTENT, st.just(USAGE), st.just(COMMENT)), max_size=8))
    done = draw(st.booleans())
    cut = draw(st.integers(0, len(PARTIAL) - 2))  # 0: no partial tail; else that many bytes of an event
    tail = PARTIAL[:cut]
    size = len(b"".join(events)) + (len(DONE) if done else 0) + len(tail)
    splits = sorted(draw(st.lists(st.integers(0, size), max_size=6)))
    return events, done, tail, splits


@settings(max_examples=400, deadline=None)
@given(streams(), st.booleans())
def test_only_whole_events_go_on_and_a_stream_not_whole_ends_with_an_error(
    stream: tuple[list[bytes], bool, bytes, list[int]], keep_usage: bool
) -> None:
    events, done, tail, splits = stream
    data = b"".join(events) + (DONE if done else b"") + tail
    relay = EventRelay(keep_usage, lambda usage: None)
    bounds = [0, *splits, len(data)]
    out = b"".join(relay.feed(data[a:b]) for a, b in itertools.pairwise(bounds) if b > a)
    end = relay.end()
    whole = b"".join(e for e in events if keep_usage or e != USAGE) + (DONE if done else b"")
    assert out == whole
    if done and not tail:
        assert end == b"" and relay.broken is None
    else:
        assert end is not None and json.loads(end[6:])["error"]["type"] == TRUNCATED
        assert relay.broken == TRUNCATED and b"PARTIAL" not in out + end


def test_a_stream_cut_inside_an_event_passed_on_unread_is_broken_off() -> None:
    """An event over MAX_EVENT_BYTES went on unread; the stream then ends inside it: no error event can follow
    (it would be read as part of that event), so the relay says to break the body off (None)."""
    from servelab.gateway.sse import MAX_EVENT_BYTES

    relay = EventRelay(False, lambda usage: None)
    assert relay.feed(b"data: " + b"x" * (MAX_EVENT_BYTES + 1))  # passed on unread
    assert relay.end() is None and relay.broken == TRUNCATED
    ended = EventRelay(False, lambda usage: None)
    ended.feed(b"data: " + b"x" * (MAX_EVENT_BYTES + 1))
    ended.feed(b"x\n\n" + DONE)  # the long event ended after all, and so did the stream
    assert ended.end() == b""
