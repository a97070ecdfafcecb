import json
from typing import Any

from servelab.core.records import ErrorClass, RequestRecord
from servelab.engines.interpret import StreamInterpreter
from servelab.engines.sse import SSEEvent


def run(events: list[Any], endpoint: str = "chat") -> RequestRecord:
    record = RequestRecord(request_id="r", endpoint=endpoint)
    interp = StreamInterpreter(record)
    for t, data in enumerate(events):
        interp.apply(SSEEvent(t * 10, data if isinstance(data, str) else json.dumps(data)))
    interp.finish()
    return record


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}], **extra}


def test_content_chunks_stamp_first_token_and_every_chunk() -> None:
    r = run(
        [
            chunk({"role": "assistant"}),
            chunk({"content": "Hel"}),
            chunk({"content": "lo"}),
            chunk(finish="stop"),
            "[DONE]",
        ]
    )
    assert r.output_text == "Hello"
    assert r.chunk_ns == [10, 20]
    assert r.first_token_ns == r.first_content_ns == 10
    assert r.finish_reason == "stop"
    assert r.client_token_count == 2


def test_a_token_with_empty_text_still_arrives() -> None:
    """vLLM streams a chunk per token; a token that ends inside a multi-byte character has empty text. It counts
    as that token's arrival (TTFT and gaps, as vllm bench serve counts it); the role-only opening chunk and a
    bare finishing chunk do not."""
    m = {"model": "m"}
    r = run(
        [
            chunk({"role": "assistant", "content": ""}, **m),
            chunk({"content": ""}, **m),  # the first bytes of a three-byte character
            chunk({"content": ""}, **m),
            chunk({"content": "\u4f60"}, **m),
            chunk({"content": ""}, finish="stop", **m),
            "[DONE]",
        ]
    )
    assert r.chunk_ns == [10, 20, 30]
    assert r.first_token_ns == r.first_content_ns == 10
    assert r.output_text == "\u4f60" and r.client_token_count == 3
    text = run(
        [{"choices": [{"index": 0, "text": "", "finish_reason": None}]}, {"choices": [{"index": 0, "text": "a"}]}]
    )
    assert text.chunk_ns == [0, 10] and text.output_text == "a"


def test_usage_only_chunk_with_empty_choices() -> None:
    usage = {
        "prompt_tokens": 12,
        "completion_tokens": 2,
        "total_tokens": 14,
        "prompt_tokens_details": {"cached_tokens": 8},
        "completion_tokens_details": {"reasoning_tokens": 1},
    }
    r = run([chunk({"content": "a"}), {"choices": [], "usage": usage}, "[DONE]"])
    assert (r.prompt_tokens, r.completion_tokens, r.cached_tokens, r.reasoning_tokens) == (12, 2, 8, 1)
    assert r.chunk_ns == [0]


def test_null_usage_on_ordinary_chunks_is_ignored() -> None:
    r = run([chunk({"content": "a"}, usage=None), "[DONE]"])
    assert r.prompt_tokens is None and r.error is None


def test_tool_call_deltas_are_assembled_by_index() -> None:
    r = run(
        [
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": ""},
                        }
                    ]
                }
            ),
            chunk({"tool_calls": [{"index": 1, "id": "c2", "function": {"name": "add", "arguments": '{"a":'}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": "Paris"}'}}]}),
            chunk({"tool_calls": [{"index": 1, "function": {"arguments": " 1}"}}]}),
            chunk(finish="tool_calls"),
        ]
    )
    assert [c["function"]["name"] for c in r.tool_calls] == ["get_weather", "add"]
    assert json.loads(r.tool_calls[0]["function"]["arguments"]) == {"city": "Paris"}
    assert json.loads(r.tool_calls[1]["function"]["arguments"]) == {"a": 1}
    assert r.tool_calls[0]["id"] == "c1"
    assert r.first_token_ns == 0 and r.first_content_ns is None
    assert r.finish_reason == "tool_calls"


def test_reasoning_fields_count_as_first_token_but_not_content() -> None:
    r = run(
        [
            chunk({"reasoning_content": "hmm "}),
            chunk({"reasoning": "ok "}),
            chunk({"content": "42"}),
            chunk(finish="stop"),
        ]
    )
    assert r.reasoning_text == "hmm ok "
    assert r.output_text == "42"
    assert r.first_token_ns == 0
    assert r.first_content_ns == 20


def test_completions_text_field() -> None:
    r = run(
        [
            {"choices": [{"index": 0, "text": " Paris", "finish_reason": None}]},
            {"choices": [{"index": 0, "text": ".", "finish_reason": "length"}]},
        ],
        endpoint="completions",
    )
    assert r.output_text == " Paris."
    assert r.finish_reason == "length"


def test_llama_cpp_timings_are_kept() -> None:
    timings = {"prompt_n": 5, "predicted_n": 3, "predicted_per_second": 55.5}
    r = run([chunk({"content": "x"}), chunk(finish="stop", timings=timings)])
    assert r.server_timings == timings


def test_malformed_json_is_an_error_class_and_stops_parsing() -> None:
    r = run([chunk({"content": "a"}), "{nope", chunk({"content": "b"})])
    assert r.error is ErrorClass.MALFORMED
    assert "nope" in (r.error_detail or "")
    assert r.output_text == "a"


def test_non_object_json_is_malformed() -> None:
    assert run(["[1, 2]"]).error is ErrorClass.MALFORMED


def test_in_band_error_event() -> None:
    r = run([chunk({"content": "a"}), {"error": {"message": "overloaded", "code": 503}}])
    assert r.error is ErrorClass.STREAM_ERROR
    assert r.error_detail == "overloaded"
