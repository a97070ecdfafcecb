"""The streaming client's faults, in process, through its transport seam (servelab.testing.Scripted: a scripted
fault a real engine cannot produce on demand — a disconnect mid-stream, silence, a refusal, an error status, the
wrong content type). The same faults over a real socket are in test_client_faults.py; timing precision keeps a
real socket (test_timestamp_precision.py)."""

from __future__ import annotations

import asyncio
import json

import pytest

from servelab.core.records import ErrorClass, RequestRecord
from servelab.engines.client import ClientOptions, StreamClient
from servelab.testing import Scripted, sse_chat

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


def send(script: Scripted, read_timeout: float = 5.0) -> RequestRecord:
    client = StreamClient(
        "http://engine.invalid:8000", options=ClientOptions(transport=script, read_timeout=read_timeout)
    )
    return asyncio.run(client.send("chat", CHAT))


def test_a_whole_stream_is_recorded_with_a_stamp_per_token_event() -> None:
    script = Scripted(pieces=sse_chat(["He", "ll", "o"], usage={"prompt_tokens": 3, "completion_tokens": 3}),
                      gap_s=0.01)  # fmt: skip
    record = send(script)
    assert record.error is None and record.output_text == "Hello" and record.finish_reason == "stop"
    assert len(record.chunk_ns) == 3 and record.completion_tokens == 3
    assert record.first_token_ns is not None and record.end_ns is not None and record.first_token_ns < record.end_ns
    (sent,) = script.sent
    assert sent["url"] == "http://engine.invalid:8000/v1/chat/completions"
    assert sent["body"]["stream"] is True and sent["body"]["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize(
    ("script", "kind", "said"),
    [
        (Scripted(pieces=sse_chat(["a", "b", "c"])[:1], then="disconnect"), ErrorClass.DISCONNECT, "closed"),
        (Scripted(pieces=sse_chat(["a"])[:1], then="silence"), ErrorClass.TIMEOUT, "no data"),
        (Scripted(refuse=True), ErrorClass.CONNECT, "refusal"),
        (Scripted(status=503, headers={"content-type": "application/json"}, pieces=[b'{"error": "busy"}']),
         ErrorClass.HTTP_5XX, "HTTP 503"),
        (Scripted(status=400, pieces=[b"bad request"]), ErrorClass.HTTP_4XX, "bad request"),
        (Scripted(headers={"content-type": "application/json"}, pieces=[json.dumps({"x": 1}).encode()]),
         ErrorClass.MALFORMED, "text/event-stream"),
        (Scripted(pieces=sse_chat(["a"], finish=None)[:1]), ErrorClass.DISCONNECT, "without [DONE]"),
    ],
)  # fmt: skip
def test_each_fault_is_classified_and_what_came_is_kept(script: Scripted, kind: ErrorClass, said: str) -> None:
    record = send(script, read_timeout=0.2)
    assert record.error == kind and said in (record.error_detail or "")
    if kind in (ErrorClass.DISCONNECT, ErrorClass.TIMEOUT) and script.pieces:
        assert record.output_text == "a"  # the part that arrived before the fault
