"""Which servers a command talks to: --target, --model and --api-key for every target or NAME=VALUE for one,
OPENAI_BASE_URL and OPENAI_API_KEY where nothing is given; and why a request failed, classed from the server's own
words (the messages are vLLM's, llama.cpp's and OpenAI's as they send them)."""

from __future__ import annotations

import json

import pytest

from servelab.core.errors import UsageError
from servelab.core.failures import examples, failure_text, failures, reason
from servelab.core.records import ErrorClass, RequestRecord
from servelab.load import TargetSpec, target_specs


def test_one_value_for_every_target_and_name_value_for_one() -> None:
    specs = target_specs(
        ["a=http://127.0.0.1:8000", "b=http://127.0.0.1:8001/v1"],
        models=["b=org/model-b", "shared-model"],
        api_keys=["a=key-a==", "b=sk-b"],
        env={},
    )
    assert specs == [
        TargetSpec("a", "http://127.0.0.1:8000", "shared-model", "key-a=="),
        TargetSpec("b", "http://127.0.0.1:8001/v1", "org/model-b", "sk-b"),
    ]


def test_the_openai_variables_fill_in_what_is_not_given() -> None:
    env = {"OPENAI_BASE_URL": "https://api.example.com/v1", "OPENAI_API_KEY": "sk-env"}
    assert target_specs([], env=env) == [TargetSpec("openai", "https://api.example.com/v1", None, "sk-env")]
    given = target_specs(["x=http://h:1"], api_keys=["sk-flag"], env=env)
    assert given == [TargetSpec("x", "http://h:1", None, "sk-flag")]  # a flag beats the variable; --target the URL
    assert target_specs([], env={}) == []


@pytest.mark.parametrize(
    ("targets", "models", "keys", "env", "said"),
    [
        (["a=http://h:1", "a=http://h:2"], [], [], {}, "two targets share a name"),
        (["a=http://h:1"], ["m1", "m2"], [], {}, "--model given twice for every target"),
        (["a=http://h:1"], ["a=m1", "a=m2"], [], {}, "--model given twice for a"),
        (["a=http://h:1"], ["a="], [], {}, "gives nothing"),
        (["a"], [], [], {}, "NAME=URL"),
        ([], [], [], {"OPENAI_BASE_URL": "api.example.com"}, "OPENAI_BASE_URL: .api.example.com. has no scheme"),
    ],
)
def test_bad_target_arguments_are_said(
    targets: list[str], models: list[str], keys: list[str], env: dict[str, str], said: str
) -> None:
    with pytest.raises(UsageError, match=said):
        target_specs(targets, models, keys, env)


def _failed(status: int | None, body: str, error: ErrorClass = ErrorClass.HTTP_4XX) -> RequestRecord:
    return RequestRecord(request_id="r", endpoint="chat", http_status=status, error=error, error_detail=body)


VLLM_SAID = "This model's maximum context length is 8192 tokens. However, your request has 32128 input tokens."
LLAMA_SAID = "the request exceeds the available context size, try increasing it"
VLLM_TOO_LONG = json.dumps({"error": {"message": VLLM_SAID, "type": "BadRequestError", "code": 400}})
LLAMA_TOO_LONG = json.dumps({"error": {"code": 400, "message": LLAMA_SAID, "type": "exceed_context_size_error"}})


@pytest.mark.parametrize(
    ("record", "why"),
    [
        (_failed(400, VLLM_TOO_LONG), "context too long"),
        (_failed(400, LLAMA_TOO_LONG), "context too long"),
        (_failed(401, '{"error": "Unauthorized"}'), "auth"),
        (_failed(429, '{"error": {"message": "Rate limit reached"}}'), "rate limit"),
        (_failed(404, '{"error": {"message": "The model `x` does not exist."}}'), "unknown model"),
        (_failed(400, '{"error": {"message": "temperature must be >= 0"}}'), "bad request"),
        (_failed(500, "Internal Server Error", ErrorClass.HTTP_5XX), "server error"),
        (_failed(None, "connection refused", ErrorClass.CONNECT), "connect"),
        (_failed(200, "no byte for 120 s", ErrorClass.TIMEOUT), "timeout"),
        (RequestRecord(request_id="r", endpoint="chat"), None),
    ],
)
def test_a_failure_is_classed_from_the_servers_words(record: RequestRecord, why: str | None) -> None:
    assert reason(record) == why


def test_failures_are_counted_and_said_with_the_servers_message() -> None:
    records = [_failed(400, VLLM_TOO_LONG), _failed(400, VLLM_TOO_LONG), _failed(401, "{}"),
               RequestRecord(request_id="ok", endpoint="chat")]  # fmt: skip
    counts, said = failures(records), examples(records)
    assert counts == {"context too long": 2, "auth": 1} and list(counts) == ["context too long", "auth"]
    text = failure_text(counts, said, len(records))
    assert text.startswith("3 of 4 failed: context too long (2): \"This model's maximum context length is 8192")
