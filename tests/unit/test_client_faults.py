"""The client against the SSE fixture server: faults a real engine cannot produce on demand."""

import asyncio

import pytest

from servelab.core.records import ErrorClass, RequestRecord
from servelab.engines.client import ClientOptions, StreamClient
from servelab.testing import free_port

BODY = {"model": "fixture", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def send(url: str, mode: str, read_timeout: float = 5.0, endpoint: str = "chat") -> RequestRecord:
    client = StreamClient(f"{url}/{mode}", options=ClientOptions(read_timeout=read_timeout, connect_timeout=2))
    return asyncio.run(client.send(endpoint, dict(BODY)))  # type: ignore[arg-type]


def test_connection_refused() -> None:
    r = send(f"http://127.0.0.1:{free_port()}", "schedule")
    assert r.error is ErrorClass.CONNECT
    assert r.sent_ns is None and r.end_ns is not None


def test_timeout_when_stream_stalls(fixture_server: str) -> None:
    r = send(fixture_server, "stall", read_timeout=0.5)
    assert r.error is ErrorClass.TIMEOUT
    assert r.output_text == "first " and len(r.chunk_ns) == 1


def test_http_5xx_and_4xx_keep_status_and_body(fixture_server: str) -> None:
    r500 = send(fixture_server, "http500")
    assert r500.error is ErrorClass.HTTP_5XX and r500.http_status == 500
    assert "fixture status 500" in (r500.error_detail or "")
    r429 = send(fixture_server, "http429")
    assert r429.error is ErrorClass.HTTP_4XX and r429.http_status == 429


def test_mid_stream_disconnect_keeps_partial_output(fixture_server: str) -> None:
    r = send(fixture_server, "disconnect")
    assert r.error is ErrorClass.DISCONNECT
    assert r.output_text == "one two three "
    assert len(r.chunk_ns) == 3


def test_stream_without_done_or_finish_reason_is_a_disconnect(fixture_server: str) -> None:
    r = send(fixture_server, "no_done")
    assert r.error is ErrorClass.DISCONNECT
    assert r.output_text == "cut "


def test_malformed_sse(fixture_server: str) -> None:
    r = send(fixture_server, "malformed")
    assert r.error is ErrorClass.MALFORMED
    assert r.output_text == "ok "


def test_in_band_error_event(fixture_server: str) -> None:
    r = send(fixture_server, "inband_error")
    assert r.error is ErrorClass.STREAM_ERROR and r.error_detail == "engine overloaded"


def test_a_reply_the_server_aborted_is_an_error_that_keeps_its_text_and_usage(fixture_server: str) -> None:
    r = send(fixture_server, "aborted")
    assert r.error is ErrorClass.STREAM_ERROR and "abort" in (r.error_detail or "")
    assert r.output_text == "half " and r.finish_reason == "abort"
    assert r.completion_tokens == 1


def test_a_server_that_ignores_max_tokens_is_cut_off_and_said_so(fixture_server: str) -> None:
    """Streaming past any bound max_tokens allows would hold the request, and the run, for good."""
    r = send(fixture_server, "endless")
    assert r.error is ErrorClass.MALFORMED and "ignores the limit" in (r.error_detail or "")
    assert r.output_text.startswith("more more ") and len(r.chunk_ns) > 4 * BODY["max_tokens"]  # type: ignore[operator]


def test_an_event_that_never_ends_is_cut_off_without_stalling_the_loop(fixture_server: str) -> None:
    """An unfinished event is kept as pieces (linear time) up to a bound: before, each piece re-joined and re-searched
    everything kept (26 MB took 6 s of one core) and nothing bounded it."""
    r = send(fixture_server, "endless_event")
    assert r.error is ErrorClass.MALFORMED and "without ending" in (r.error_detail or "")


def test_an_error_body_that_never_ends_is_read_only_to_its_reason(fixture_server: str) -> None:
    r = send(fixture_server, "endless_error")
    assert r.error is ErrorClass.HTTP_5XX and r.http_status == 500
    assert (r.error_detail or "").startswith("HTTP 500: engine failed: yyy")


def test_event_split_across_tcp_writes_is_stamped_at_its_last_byte(fixture_server: str) -> None:
    r = send(fixture_server, "split")
    assert r.error is None, r.error_detail
    assert r.output_text == "split-event"
    assert r.first_byte_ns is not None and r.first_token_ns is not None
    # the event took several 30 ms writes to arrive: its token is stamped at the last one
    assert (r.first_token_ns - r.first_byte_ns) / 1e6 > 60


def test_tool_calls_and_usage_over_the_wire(fixture_server: str) -> None:
    r = send(fixture_server, "tools")
    assert r.error is None, r.error_detail
    assert r.tool_calls[0]["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert (r.prompt_tokens, r.completion_tokens, r.cached_tokens) == (7, 3, 4)
    assert r.finish_reason == "tool_calls"


def test_reasoning_then_content_timestamps(fixture_server: str) -> None:
    r = send(fixture_server, "reasoning")
    assert r.error is None, r.error_detail
    assert r.reasoning_text == "think more " and r.output_text == "answer"
    assert r.first_token_ns is not None and r.first_content_ns is not None
    assert r.first_content_ns - r.first_token_ns > 30_000_000  # two 20 ms gaps after the first reasoning chunk
    assert r.server_timings == {"predicted_per_second": 42.0}


def test_timestamps_are_ordered(fixture_server: str) -> None:
    r = send(fixture_server, "schedule")
    assert r.error is None, r.error_detail
    stamps = [r.scheduled_ns, r.sent_ns, r.headers_ns, r.first_token_ns, r.chunk_ns[-1], r.end_ns]
    assert all(s is not None for s in stamps)
    assert stamps == sorted(stamps)  # type: ignore[type-var]
    assert r.first_byte_ns is not None and r.first_byte_ns <= r.headers_ns  # type: ignore[operator]


def test_a_cancelled_run_records_the_request_and_re_raises(fixture_server: str) -> None:
    client = StreamClient(f"{fixture_server}/stall")
    record = client.new_record("chat")

    async def go() -> None:
        task = asyncio.create_task(client.send("chat", dict(BODY), record=record))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert record.error is ErrorClass.CANCELLED
