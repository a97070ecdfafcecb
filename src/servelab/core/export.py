"""The versioned JSON export of a run (documented in docs/run-export.md)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from servelab.core.records import ErrorClass
from servelab.core.results import AnyResult, load_result
from servelab.core.store import RunStore

SCHEMA_NAME: Literal["servelab.run"] = "servelab.run"
SCHEMA_VERSION: Literal[2] = 2  # 2: the typed result, labels on records, status interrupted, the run's error


class ExportedRecord(BaseModel):
    """One request as the client saw it; times are perf_counter_ns on the client."""

    model_config = ConfigDict(extra="forbid")
    request_id: str
    endpoint: str
    scenario: str
    target: str
    model: str
    scheduled_ns: int | None
    sent_ns: int | None
    headers_ns: int | None
    first_byte_ns: int | None
    first_token_ns: int | None = Field(description="first token of any kind: reasoning, content or tool call")
    first_content_ns: int | None
    end_ns: int | None
    chunk_ns: list[int] = Field(description="arrival of every token-bearing SSE event")
    http_status: int | None
    finish_reason: str | None
    prompt_tokens: int | None = Field(description="server usage")
    completion_tokens: int | None = Field(description="server usage")
    cached_tokens: int | None = Field(description="usage.prompt_tokens_details.cached_tokens")
    reasoning_tokens: int | None
    client_token_count: int = Field(description="token-bearing events counted by the client")
    output_text: str
    reasoning_text: str
    tool_calls: list[dict[str, Any]]
    server_timings: dict[str, Any] | None = Field(description="llama.cpp `timings`, when sent")
    error: ErrorClass | None
    error_detail: str | None
    labels: dict[str, str | int | float] = Field(
        default_factory=dict,
        description="where the request belongs: step, level, rate, phase, condition, suite, item, repeat, turn, "
        "session",
    )


class ExportedRun(BaseModel):
    model_config = ConfigDict(extra="forbid")
    run_id: str
    kind: str
    created_at: float = Field(description="Unix time")
    finished_at: float | None
    status: Literal["running", "complete", "failed", "interrupted"] = Field(
        description="'running' on a run that was killed before it finished; 'interrupted': Ctrl-C or a signal"
    )
    error: str | None = Field(None, description="what stopped a failed or interrupted run")
    manifest: dict[str, Any]


class RunExport(BaseModel):
    model_config = ConfigDict(extra="forbid")
    schema_name: Literal["servelab.run"] = Field(SCHEMA_NAME, alias="schema")
    schema_version: Literal[2] = SCHEMA_VERSION
    run: ExportedRun
    result: AnyResult | None = Field(description="the run's typed result, by its kind; null when it has none")
    summaries: dict[str, dict[str, Any]] = Field(description="raw material kept beside the result, by name")
    records: list[ExportedRecord]


def export_run(store: RunStore, run_id: str) -> dict[str, Any]:
    """The run as a JSON-ready dict that validates against :class:`RunExport`."""
    info = store.get_run(run_id)
    result = load_result(store, info)
    data = {
        "schema": SCHEMA_NAME,
        "schema_version": SCHEMA_VERSION,
        "run": {
            "run_id": info.run_id,
            "kind": info.kind,
            "created_at": info.created_at,
            "finished_at": info.finished_at,
            "status": info.status,
            "error": info.error,
            "manifest": info.manifest,
        },
        "result": None if result is None else result.model_dump(mode="json"),
        "summaries": store.summaries(info.run_id),
        "records": [r.to_dict() for r in store.iter_records(info.run_id)],
    }
    RunExport.model_validate(data)
    return data


def json_schema() -> dict[str, Any]:
    return RunExport.model_json_schema(by_alias=True)


if __name__ == "__main__":
    import json as _json

    print(_json.dumps(json_schema(), indent=2))
