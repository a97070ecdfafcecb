"""Figures computed from raw request records (never from averaged averages)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from servelab.core.failures import classify
from servelab.core.figures import Figure, stored_figure
from servelab.core.records import RequestRecord
from servelab.core.stats import percentiles

NS_PER_MS = 1e6
NS_PER_S = 1e9
PER_REQUEST = frozenset({"ttft", "ttft_content", "tpot", "stream_tok_s", "e2e"})  # one sample per ok request at most


def ttft_ms(record: RequestRecord, *, content: bool = False, from_scheduled: bool = False) -> float | None:
    """Time to first token (any kind, or content only), from sent or from scheduled."""
    first = record.first_content_ns if content else record.first_token_ns
    start = record.scheduled_ns if from_scheduled else record.sent_ns
    if first is None or start is None:
        return None
    return (first - start) / NS_PER_MS


def output_tokens(record: RequestRecord) -> int:
    """Server usage when given, else the client's own count."""
    return record.completion_tokens if record.completion_tokens is not None else record.client_token_count


def inter_chunk_gaps_ms(record: RequestRecord) -> list[float]:
    ts = record.chunk_ns
    return [(b - a) / NS_PER_MS for a, b in itertools.pairwise(ts)]


def decode_window_ns(record: RequestRecord) -> int | None:
    """First token → last token chunk: the decode phase of one stream."""
    if record.first_token_ns is None or not record.chunk_ns:
        return None
    span = record.chunk_ns[-1] - record.first_token_ns
    return span if span > 0 else None


def e2e_ms(record: RequestRecord) -> float | None:
    """Sent -> the last byte: the whole request as its client waited for it."""
    if record.end_ns is None or record.sent_ns is None:
        return None
    return (record.end_ns - record.sent_ns) / NS_PER_MS


def tpot_ms(record: RequestRecord) -> float | None:
    """(end of decode − first token) / (tokens − 1)."""
    span, tokens = decode_window_ns(record), output_tokens(record)
    if span is None or tokens < 2:
        return None
    return span / (tokens - 1) / NS_PER_MS


def stream_tok_s(record: RequestRecord) -> float | None:
    """Per-stream decode speed: (tokens − 1) / (last token − first token)."""
    span, tokens = decode_window_ns(record), output_tokens(record)
    if span is None or tokens < 2:
        return None
    return (tokens - 1) / (span / NS_PER_S)


def streamed_tok_s(records: Sequence[RequestRecord]) -> float | None:
    """Tokens that arrived while a load had a request in flight (its rounds' spans, not the time between them),
    every request counted, those cut off when the load stopped included: a load's throughput even when its requests
    outlast the window (a long prefill, a slow engine) and none finished. None when nothing was sent."""
    return _over_window(records, sum(output_tokens(r) if r.ok else r.client_token_count for r in records))


def prompt_tok_s(records: Sequence[RequestRecord]) -> float | None:
    """Prompt tokens taken in (requests that got a first token and whose usage says how many) over the span the
    load had a request in flight: what a long-prefill load did, which its few output tokens do not show."""
    return _over_window(records, sum(r.prompt_tokens or 0 for r in records if r.first_token_ns is not None))


def _over_window(records: Sequence[RequestRecord], tokens: int) -> float | None:
    """Tokens per second of the span the load had a request in flight; None when nothing was sent."""
    window = active_window_ns(records)
    return tokens / (window / NS_PER_S) if window else None


def active_window_ns(records: Sequence[RequestRecord]) -> int:
    """Total time during which at least one request was in flight (idle gaps excluded)."""
    spans = sorted((r.sent_ns, r.end_ns) for r in records if r.sent_ns is not None and r.end_ns is not None)
    total, cur_start, cur_end = 0, None, None
    for start, end in spans:
        if cur_end is None or start > cur_end:
            if cur_start is not None and cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_start is not None and cur_end is not None:
        total += cur_end - cur_start
    return total


@dataclass(slots=True)
class Summary:
    requests: int
    ok: int
    errors: dict[str, int]
    output_tokens: int
    ttft_ms: dict[str, float]
    ttft_content_ms: dict[str, float]
    ttft_from_scheduled_ms: dict[str, float]
    itl_ms: dict[str, float]
    tpot_ms: dict[str, float]
    stream_tok_s: dict[str, float]
    aggregate_tok_s: float
    active_window_s: float
    schedule_lag_ms: dict[str, float]
    samples: dict[str, int] = field(default_factory=dict)
    e2e_ms: dict[str, float] = field(default_factory=dict)  # sent -> last byte, per ok request
    requests_per_s: float | None = None  # ok requests over the active window (None: a run stored before it)
    input_tokens: int = 0  # server usage: prompt tokens of the ok requests
    failures: dict[str, int] = field(default_factory=dict)  # why requests failed (core.failures), most common first
    failure_messages: dict[str, str] = field(default_factory=dict)  # the server's own words, one per reason
    maxima: dict[str, float] = field(default_factory=dict)  # figure -> its largest sample: what a p99 from too few is

    def figure(self, name: str, key: str) -> Figure:
        """A stored percentile of one figure (``"ttft_ms"``, ``"p99"``) with the samples it rests on (core.figures
        prints it as one only where they support it)."""
        values, short = getattr(self, name), name.removesuffix("_ms")
        n = self.samples.get(short, self.ok if short in PER_REQUEST else None)  # stored before counts: at most ok
        return stored_figure(values, key, n, self.maxima.get(name))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _present(values: Iterable[float | None]) -> list[float]:
    return [v for v in values if v is not None]


def _samples(records: Sequence[RequestRecord], ok: Sequence[RequestRecord]) -> dict[str, list[float]]:
    """Every per-request figure's raw samples (ok requests; the schedule lag of every request), by figure name."""
    return {
        "ttft_ms": _present(ttft_ms(r) for r in ok),
        "ttft_content_ms": _present(ttft_ms(r, content=True) for r in ok),
        "ttft_from_scheduled_ms": _present(ttft_ms(r, from_scheduled=True) for r in ok),
        "itl_ms": [g for r in ok for g in inter_chunk_gaps_ms(r)],
        "tpot_ms": _present(tpot_ms(r) for r in ok),
        "stream_tok_s": _present(stream_tok_s(r) for r in ok),
        "schedule_lag_ms": _present(
            None if r.sent_ns is None or r.scheduled_ns is None else (r.sent_ns - r.scheduled_ns) / NS_PER_MS
            for r in records
        ),
        "e2e_ms": _present(e2e_ms(r) for r in ok),
    }


def summarize(records: Sequence[RequestRecord]) -> Summary:
    """Every figure of a set of records, each percentile with the count of samples it rests on (``samples``, by
    figure name less ``_ms``) and its largest sample (``maxima``)."""
    ok = [r for r in records if r.ok]
    errors: dict[str, int] = {}
    for r in records:
        if r.error is not None:
            errors[r.error.value] = errors.get(r.error.value, 0) + 1
    raw = _samples(records, ok)
    window = active_window_ns(ok)
    tokens = sum(output_tokens(r) for r in ok)
    failed, said = classify(records)
    return Summary(
        requests=len(records),
        ok=len(ok),
        errors=errors,
        output_tokens=tokens,
        aggregate_tok_s=tokens / (window / NS_PER_S) if window else 0.0,
        active_window_s=window / NS_PER_S,
        samples={name.removesuffix("_ms"): len(values) for name, values in raw.items()},
        requests_per_s=len(ok) / (window / NS_PER_S) if window else 0.0,
        input_tokens=sum(r.prompt_tokens or 0 for r in ok),
        failures=failed,
        failure_messages=said,
        maxima={name: max(values) for name, values in raw.items() if values},
        **{name: percentiles(values) for name, values in raw.items()},
    )
