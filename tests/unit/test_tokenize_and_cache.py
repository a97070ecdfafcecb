"""Engine-neutral pieces that the llama.cpp runs showed were vLLM-only: /tokenize's body and answer, and what
counts as a cold request that hit the prefix cache."""

import pytest

from servelab.core.records import RequestRecord
from servelab.engines.control import token_count, tokenize_body
from servelab.load.runner import cache_reached_unique_part


def test_one_tokenize_body_for_vllm_and_llama_cpp() -> None:
    body = tokenize_body("m", "hello")
    assert body["prompt"] == "hello"  # vLLM, SGLang
    assert body["content"] == "hello"  # llama.cpp's llama-server


@pytest.mark.parametrize(
    ("status", "data", "want"),
    [
        (200, {"count": 7, "tokens": [1] * 7, "max_model_len": 8192}, 7),  # vLLM
        (200, {"tokens": [28120, 11, 3]}, 3),  # llama.cpp: the list only
        (200, {"count": True}, None),  # a bool is not a count
        (200, {"tokens": "abc"}, None),
        (404, {"count": 7}, None),
        (200, ["not", "an", "object"], None),
    ],
)
def test_token_count_reads_either_answer(status: int, data: object, want: int | None) -> None:
    assert token_count(status, data) == want


def record(cached: int | None, prompt: int) -> RequestRecord:
    return RequestRecord(request_id="r", endpoint="chat", cached_tokens=cached, prompt_tokens=prompt)


def test_a_templates_shared_head_is_not_a_warm_cache() -> None:
    assert not cache_reached_unique_part(record(None, 400))
    assert not cache_reached_unique_part(record(5, 433))  # llama.cpp reused SmolLM2's default system turn
    assert not cache_reached_unique_part(record(32, 120))
    assert cache_reached_unique_part(record(48, 120))  # past the head: the unique part came from the cache
    assert cache_reached_unique_part(record(1600, 2000))
