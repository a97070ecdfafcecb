"""The fake SSE server of servelab.testing (not an LLM), through the real streaming client on loopback: the sink's
shape (chunks per write, the RECV:SENT head) and the schedule mode's stamps, one server for every path."""

from __future__ import annotations

import asyncio

from servelab.core.records import ErrorClass, RequestRecord
from servelab.engines.client import StreamClient
from servelab.testing import FakeServer, SinkShape, loop_in_thread, serve


async def _started(fake: FakeServer) -> int:
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().create_task(serve(0, ready, fake))
    return await ready


def _ask(url: str, body: dict[str, object]) -> RequestRecord:
    async def one() -> RequestRecord:
        client = StreamClient(url)
        return await client.send("chat", {"model": "m", "messages": [], **body})

    return asyncio.run(one())


def test_the_sink_answers_every_path_in_its_shape() -> None:
    fake = FakeServer("sink", SinkShape(chunks=6, itl_ms=5, burst=3), "sink")
    with loop_in_thread(lambda: _started(fake)) as port:
        record = _ask(f"http://127.0.0.1:{port}", {})
    assert record.ok and record.completion_tokens == 6 and record.client_token_count == 6
    head, _, rest = record.output_text.partition(" ")
    recv, sent = (int(x) for x in head.split(":"))
    assert 0 < recv <= sent and len(rest.split()) == 5
    assert len(record.chunk_ns) == 6 and record.chunk_ns[2] - record.chunk_ns[0] < 4e6


def test_schedule_stamps_and_an_unknown_mode_is_a_500() -> None:
    with loop_in_thread(lambda: _started(FakeServer())) as port:
        record = _ask(f"http://127.0.0.1:{port}/schedule", {"max_tokens": 3, "fixture_itl_ms": 1})
        failed = _ask(f"http://127.0.0.1:{port}/nothing", {})
    assert record.ok and record.completion_tokens == 3
    assert [int(c.split(":")[0]) > 0 for c in record.output_text.split()] == [True] * 3
    assert failed.error is ErrorClass.HTTP_5XX and "fixture status 500" in (failed.error_detail or "")
