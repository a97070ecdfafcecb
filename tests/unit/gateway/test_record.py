"""The gateway's recorded trace: block hashes that share exactly the prompts' shared prefix blocks, lengths from
the engine's usage, no text, and a request it cannot record dropped and counted (never raised)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servelab.gateway.admission import CHAT, COMPLETIONS, TokenCounter
from servelab.gateway.record import Recorder, block_hashes
from servelab.load.sessions import read_trace

IDS = st.lists(st.integers(0, 200_000), max_size=300)


@given(shared=IDS, a=IDS, b=IDS, block=st.integers(1, 64))
def test_two_prompts_share_exactly_their_shared_whole_blocks(shared: list[int], a: list[int], b: list[int],
                                                              block: int) -> None:  # fmt: skip
    """A hash id per block, the last one short; equal ids up to the last block both prompts hold whole and equal,
    different from the first block where they differ (BLAKE2b: a collision would be news)."""
    first, second = shared + a, shared + b
    ha, hb = block_hashes(first, block), block_hashes(second, block)
    assert len(ha) == math.ceil(len(first) / block) and all(0 <= h < 2**63 for h in ha)
    same = 0
    while (same + 1) * block <= min(len(first), len(second)) and first[: (same + 1) * block] == second[
            : (same + 1) * block]:  # fmt: skip
        same += 1
    assert ha[:same] == hb[:same]
    if same < min(len(ha), len(hb)) and first[: (same + 1) * block] != second[: (same + 1) * block]:
        assert ha[same] != hb[same]


@pytest.fixture(scope="module")
def counter(model_folder: Path) -> TokenCounter:
    return TokenCounter.from_folder(model_folder)


def _chat(system: str, question: str, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
            **extra}  # fmt: skip


SYSTEM = " ".join(f"rule {i}: answer in the voice of the narrator, kept short and plain." for i in range(60))


def test_chats_sharing_a_system_prompt_share_its_blocks_and_keep_no_text(counter: TokenCounter, tmp_path: Path) -> None:
    recorder = Recorder(tmp_path / "trace.jsonl", 64)
    usage = {"prompt_tokens": 999, "completion_tokens": 7}
    one = json.loads(recorder.line(counter, CHAT, _chat(SYSTEM, "first question about zebras"), 0, usage) or "")
    two = json.loads(recorder.line(counter, CHAT, _chat(SYSTEM, "second one, on owls", user="s-1"), 0, usage) or "")
    other = json.loads(recorder.line(counter, CHAT, _chat("short", "zebras"), 0, usage) or "")
    ids = counter.prompt_ids(CHAT, _chat(SYSTEM, "first question about zebras"))
    assert one["hash_ids"] == block_hashes(ids, 64) and len(one["hash_ids"]) == math.ceil(len(ids) / 64)
    shared = sum(1 for x, y in zip(one["hash_ids"], two["hash_ids"], strict=False) if x == y)
    assert shared >= len(counter.prompt_ids(CHAT, _chat(SYSTEM, ""))) // 64 - 1 >= 5
    assert other["hash_ids"][0] != one["hash_ids"][0]
    assert one["input_length"] == 999 and one["output_length"] == 7  # the engine's usage
    external = recorder.line(counter, CHAT, _chat(SYSTEM, "x"), 0, {"prompt_tokens": None, "completion_tokens": 7})
    assert json.loads(external or "")["input_length"] == len(counter.prompt_ids(CHAT, _chat(SYSTEM, "x")))
    assert two["session"] == "s-1" and "session" not in one
    text = json.dumps([one, two, other])
    assert not any(word in text for word in ("zebras", "owls", "narrator", "rule"))


def test_what_cannot_be_recorded_is_dropped_and_counted(counter: TokenCounter, tmp_path: Path) -> None:
    """No usage, no tokenizer, a body the admission could not count: no line, no exception; the rest written."""
    path = tmp_path / "trace.jsonl"
    recorder = Recorder(path, 512)
    good = {"prompt_tokens": 12, "completion_tokens": 3}
    recorder.note(counter, CHAT, _chat("a", "b"), 0, good)
    recorder.note(counter, CHAT, _chat("a", "b"), 0, {})
    recorder.note(None, CHAT, _chat("a", "b"), 0, good)
    recorder.note(counter, CHAT, {"model": "m", "messages": "not a list"}, 0, good)
    recorder.note(counter, COMPLETIONS, {"model": "m", "prompt": [5, 6, 7]}, 0, good)
    recorder.close()
    assert (recorder.written, recorder.dropped) == (2, 3)
    trace = read_trace(path)  # the bench's own reader takes it
    assert [r.output_tokens for r in trace.requests] == [3, 3] and trace.requests[1].input_tokens == 12
