"""The gateway passes each chunk on when it arrives, not when the reply ends. Against the SSE fixture (not an LLM:
its ``schedule`` mode writes a chunk every 40 ms and puts its ``perf_counter_ns()`` before each write into the
chunk, a timing a real engine cannot promise on a busy 2-core machine), so the test can compare when each chunk
reached the client with when the upstream sent the next one. CLOCK_MONOTONIC is shared by the processes of one
host. A gateway that held the reply until its end delivers every chunk after the last was sent."""

from __future__ import annotations

import asyncio

from servelab.engines.client import ClientOptions, StreamClient
from servelab.gateway import GatewayConfig, running
from servelab.gateway.config import Policy, Upstream

CHUNKS = 12
ITL_MS = 40


def _config(upstream: str) -> GatewayConfig:
    return GatewayConfig(
        port=0,
        local=Upstream(url=f"{upstream}/schedule", health_path="/v1/models", connect_timeout_s=2, read_timeout_s=10),
        policy=Policy(health_interval_s=30, keepalive_s=0),
    )


def _sent_ns(output_text: str) -> list[int]:
    return [int(pair.split(":")[0]) for pair in output_text.split()]


def test_each_chunk_reaches_the_client_before_the_upstream_sends_the_next(fixture_server: str) -> None:
    body = {"model": "fixture", "messages": [], "max_tokens": CHUNKS, "fixture_ttft_ms": 20, "fixture_itl_ms": ITL_MS}
    with running(_config(fixture_server)) as (url, _):
        record = asyncio.run(StreamClient(url, options=ClientOptions(read_timeout=10)).send("chat", body))
    assert record.ok, record.error_detail
    sent = _sent_ns(record.output_text)
    assert len(sent) == len(record.chunk_ns) == CHUNKS  # one by one: as many chunks as the upstream wrote
    early = sum(arrived < next_sent for arrived, next_sent in zip(record.chunk_ns, sent[1:], strict=False))
    # 40 ms is the slack each chunk has; a preempted gateway or client may miss it now and then, a buffering one
    # misses it every time
    assert early >= (CHUNKS - 1) // 2, f"only {early} of {CHUNKS - 1} chunks arrived before the next was sent"
