"""Mooncake-format trace replay: the sample (tests/fixtures/mooncake_sample.jsonl, written from the published
format: ``timestamp`` ms since the first request, ``input_length``, ``output_length``, ``hash_ids`` of 512-token
blocks) replayed against the cache truth fixture keeps its sharing: each request's cached tokens are its hash-id
overlap with earlier requests, to within a block; a bad line is refused with its number."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from servelab.bench import Load, run_bench, trace_scenario
from servelab.core.errors import UsageError
from servelab.core.store import RunStore
from servelab.load.runner import Target
from servelab.load.sessions import overlap_blocks, read_trace

SAMPLE = Path(__file__).parents[2] / "fixtures" / "mooncake_sample.jsonl"
BLOCK, ENGINE_BLOCK, LINE = 512, 16, 8  # Mooncake's block; the fixture's cache block; a filler line's words


def _shared_tokens(lines: list[dict[str, Any]], i: int) -> int:
    """Tokens request ``i`` shares with an earlier one by the published semantics: each leading common hash id is a
    block of 512 (a request's last block as long as its input leaves it)."""
    best = 0
    for j in range(i):
        common = 0
        for a, b in zip(lines[i]["hash_ids"], lines[j]["hash_ids"], strict=False):
            if a != b:
                break
            common += 1
        best = max(best, min(common * BLOCK, lines[i]["input_length"], lines[j]["input_length"]))
    return best


@pytest.mark.parametrize(
    "cache_sim", [["--base-ms", 1, "--per-token-ms", 0.02, "--step-ms", 0.5, "--capacity-blocks", 100_000]],
    indirect=True,
)  # fmt: skip
def test_the_sample_replayed_keeps_its_prefix_sharing(cache_sim: Target, tmp_path: Path) -> None:
    lines = [json.loads(x) for x in SAMPLE.read_text().splitlines()]
    with RunStore(tmp_path / "s.sqlite") as db:
        result = run_bench(db, [cache_sim], [trace_scenario(SAMPLE)], Load(warmup=0))
    records = sorted(result.records, key=lambda r: int(r.labels.item or -1))
    assert [int(r.labels.item or -1) for r in records] == list(range(len(lines))) and all(r.ok for r in records)
    for i, record in enumerate(records):
        expected = _shared_tokens(lines, i)
        assert record.cached_tokens is not None
        assert abs(record.cached_tokens - expected) <= ENGINE_BLOCK + LINE, (i, record.cached_tokens, expected)
        assert abs((record.prompt_tokens or 0) - lines[i]["input_length"]) <= LINE + 2  # the template's two words
        assert record.completion_tokens == lines[i]["output_length"]
    assert sum(r.cached_tokens or 0 for r in records) > 4 * BLOCK  # the sample does share


def test_arrivals_keep_the_traces_times_scaled() -> None:
    trace = read_trace(SAMPLE)
    assert [r.at_s for r in trace.requests] == pytest.approx([0.4 * i for i in range(8)])
    scenario = trace_scenario(SAMPLE, speed=4.0)
    assert scenario.trace is not None and scenario.trace.speed == 4.0 and scenario.max_tokens == 30
    assert [overlap_blocks(trace.requests, i) for i in range(8)] == [0, 1, 3, 0, 4, 1, 0, 2]


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ('{"timestamp": 0, "input_length": 10, "output_length": 5}', "line 2: a trace request needs"),
        ('{"timestamp": 0, "input_length": 0, "output_length": 5, "hash_ids": []}', "at least 1"),
        ('{"timestamp": 0, "input_length": 9, "output_length": 5, "hash_ids": ["a"]}', "hash_ids is a list"),
        ('{"timestamp": "now", "input_length": 9, "output_length": 5, "hash_ids": [1]}', "timestamp is a number"),
        ("not json", "line 2: not JSON"),
    ],
)
def test_a_bad_trace_line_is_refused_with_its_number(tmp_path: Path, line: str, said: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(SAMPLE.read_text().splitlines()[0] + "\n" + line + "\n")
    with pytest.raises(UsageError, match=said):
        read_trace(path)
