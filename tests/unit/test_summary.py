import pytest

from servelab.core.records import ErrorClass, RequestRecord
from servelab.core.summary import active_window_ns, inter_chunk_gaps_ms, stream_tok_s, summarize, tpot_ms, ttft_ms

MS = 1_000_000


def rec(sent: int, chunks: list[int], tokens: int | None = None, scheduled: int | None = None) -> RequestRecord:
    return RequestRecord(
        request_id="r",
        endpoint="chat",
        scheduled_ns=scheduled if scheduled is not None else sent,
        sent_ns=sent,
        first_token_ns=chunks[0],
        first_content_ns=chunks[0],
        chunk_ns=chunks,
        end_ns=chunks[-1] + MS,
        completion_tokens=tokens,
        client_token_count=len(chunks),
    )


def test_per_request_figures() -> None:
    r = rec(0, [100 * MS, 110 * MS, 130 * MS], tokens=3, scheduled=-5 * MS)
    assert ttft_ms(r) == 100
    assert ttft_ms(r, from_scheduled=True) == 105
    assert inter_chunk_gaps_ms(r) == [10, 20]
    assert tpot_ms(r) == 15  # (130 - 100) / (3 - 1)
    assert stream_tok_s(r) == pytest.approx(2 / 0.030)


def test_server_usage_preferred_over_client_count() -> None:
    r = rec(0, [10 * MS, 20 * MS], tokens=5)  # two chunks carried five tokens
    assert tpot_ms(r) == pytest.approx(10 / 4)


def test_active_window_excludes_idle_time() -> None:
    a = rec(0, [1 * MS, 2 * MS])  # busy 0..3 ms
    b = rec(1_000 * MS, [1_001 * MS, 1_002 * MS])  # busy 1000..1003 ms, a second later
    assert active_window_ns([a, b]) == 6 * MS
    s = summarize([a, b])
    assert s.aggregate_tok_s == pytest.approx(4 / 0.006)  # not 4 tokens over a whole second


def test_errors_are_counted_not_averaged_in() -> None:
    bad = RequestRecord(request_id="x", endpoint="chat", error=ErrorClass.TIMEOUT)
    s = summarize([rec(0, [10 * MS, 20 * MS], tokens=2), bad])
    assert (s.requests, s.ok, s.errors) == (2, 1, {"timeout": 1})
    assert s.ttft_ms["p50"] == 10
