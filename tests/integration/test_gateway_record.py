"""The gateway's recorded traffic (``[record] path``) against the embedded vLLM: one trace line per answered
request with the engine's own token counts and no text, prompts that share a prefix sharing its hash ids, and the
trace replayed by the bench with that sharing kept (the replay's shared block found in the engine's cache)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from servelab.bench import Load, resolve_targets, run_bench
from servelab.core.store import RunStore
from servelab.engines.embedded import EngineState
from servelab.gateway.config import GatewayConfig, Policy, Record, Upstream
from servelab.load.scenarios import filler_text
from servelab.load.sessions import trace_scenario
from tests.integration.test_gateway import serve

pytestmark = pytest.mark.integration
SYSTEM = filler_text(0, "record-itest", lines=110)  # ~1,300 tokens: two whole 512-token blocks


def _chat(system: str, question: str, stream: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "smollm2-135m-instruct",
        "max_tokens": 8,
        "ignore_eos": True,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
    }
    return body | ({"stream": True, "stream_options": {"include_usage": True}} if stream else {})  # fmt: skip


def _usage(reply: httpx.Response) -> dict[str, int]:
    if reply.headers.get("content-type", "").startswith("text/event-stream"):
        events = [json.loads(line[6:]) for line in reply.text.splitlines() if line.startswith("data: {")]
        return next(e["usage"] for e in reversed(events) if e.get("usage"))
    return dict(reply.json()["usage"])


def test_a_recorded_trace_keeps_the_sharing_and_replays(
    engine: EngineState, model_folder: Path, tmp_path: Path
) -> None:
    path = tmp_path / "trace.jsonl"
    config = GatewayConfig(local=Upstream(url=engine.url, connect_timeout_s=2, tokenizer=str(model_folder)),
                           policy=Policy(health_interval_s=5), record=Record(path=str(path)))  # fmt: skip
    bodies = [_chat(SYSTEM, "What is the first rule?"), _chat(SYSTEM, "And the second?", stream=True),
              _chat("Be brief.", "What is the first rule?")]  # fmt: skip
    with serve(config) as (url, _), httpx.Client(base_url=url, timeout=300) as gw:
        replies = [gw.post("/v1/chat/completions", json=body) for body in bodies]
    assert all(r.status_code == 200 for r in replies), [r.text for r in replies]
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(x["input_length"], x["output_length"]) for x in lines] == [
        (u["prompt_tokens"], u["completion_tokens"]) for u in map(_usage, replies)]  # fmt: skip
    assert len(lines[0]["hash_ids"]) == len(lines[1]["hash_ids"]) == 3
    assert lines[0]["hash_ids"][:2] == lines[1]["hash_ids"][:2] != lines[2]["hash_ids"][:2]
    assert "rule" not in path.read_text() and "Be brief" not in path.read_text()
    with RunStore(tmp_path / "runs.sqlite") as store:
        result = run_bench(store, resolve_targets([("vllm", engine.url)]), [trace_scenario(path)],
                           Load(warmup=0))  # fmt: skip
    sent = sorted(result.records, key=lambda r: int(r.labels.item or 0))
    assert len(sent) == 3 and all(r.ok for r in sent), [r.error_detail for r in sent]
    assert (sent[1].cached_tokens or 0) >= 512 > (sent[2].cached_tokens or 0)  # the shared blocks, and none
