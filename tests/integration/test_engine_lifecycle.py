"""Engine start failures, and errors classified when the engine stops mid-run."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from servelab.core.errors import EngineError
from servelab.core.records import ErrorClass, RequestRecord
from servelab.core.store import RunStore
from servelab.engines.client import StreamClient
from servelab.engines.embedded import MODEL_NAME, EmbeddedEngine, EngineSettings, EngineState


def test_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        engine = EmbeddedEngine(EngineSettings(port=port, home=tmp_path))
        with pytest.raises(EngineError, match=f"port {port} .* in use"):
            engine.up()


@pytest.mark.integration
def test_failed_start_reports_the_log_tail(engine: EngineState) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    bad = EmbeddedEngine(EngineSettings(port=port, instance="bad-engine", extra_args=("--max-model-len", "99999999")))
    with pytest.raises(EngineError) as caught:
        bad.up()
    message = str(caught.value)
    assert "exited with code" in message and "log" in message
    assert "max" in message.lower()  # the tail shows vLLM's own complaint about the length
    assert bad.status() is None


@pytest.mark.stops_engine
def test_errors_classified_when_engine_stops_mid_run(engine_handle: EmbeddedEngine, tmp_path: Path) -> None:
    state = engine_handle.up()
    client = StreamClient(state.url)
    payload = {
        "model": MODEL_NAME,
        "messages": [{"role": "user", "content": "Count."}],
        "max_tokens": 4000,
        "ignore_eos": True,
    }
    with RunStore(tmp_path / "runs.sqlite") as store:
        run = store.create_run("stop-mid-run", {})

        async def go() -> list[RequestRecord]:
            tasks = [asyncio.create_task(client.send("chat", payload)) for _ in range(2)]
            await asyncio.sleep(4.0)  # let tokens flow
            await asyncio.to_thread(engine_handle.down)
            done = list(await asyncio.gather(*tasks))
            done.append(await client.send("chat", payload))  # after the stop
            return done

        records = asyncio.run(go())
        for record in records:
            store.add_record(run, record)
        stored = store.records(run)
    in_flight, after = records[:2], records[2]
    for r in in_flight:
        assert r.error in (ErrorClass.DISCONNECT, ErrorClass.STREAM_ERROR), (r.error, r.error_detail)
        assert r.chunk_ns and r.output_text  # what was measured before the stop is kept
    assert after.error is ErrorClass.CONNECT
    assert len(stored) == 3
