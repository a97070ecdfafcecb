"""Targets side by side, per scenario: medians with bootstrap intervals, a mark where they differ."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from servelab.core.records import RequestRecord
from servelab.core.results import Cell, Row
from servelab.core.stats import Interval, bootstrap_median_interval, mann_whitney_p
from servelab.core.summary import stream_tok_s, summarize, ttft_ms


def _interval(values: list[float]) -> Interval | None:
    return bootstrap_median_interval(values, resamples=2000) if values else None


def cell(records: Sequence[RequestRecord]) -> Cell:
    ok = [r for r in records if r.ok]
    speeds = [v for v in (stream_tok_s(r) for r in ok) if v is not None]
    ttfts = [v for v in (ttft_ms(r) for r in ok) if v is not None]
    cached = [r.cached_tokens for r in ok if r.cached_tokens is not None]
    summary = summarize(records)  # once: the aggregate and the failures with their words
    return Cell(
        n=len(records),
        speeds=speeds,
        ttfts=ttfts,
        ok=len(ok),
        tok_s=_interval(speeds),
        ttft_ms=_interval(ttfts),
        aggregate_tok_s=summary.aggregate_tok_s,
        cached_tokens=max(cached) if cached else None,
        failures=summary.failures,
        failure_messages=summary.failure_messages,
    )


ALPHA = 0.05


def _differs(a: list[float], b: list[float]) -> bool:
    return bool(a) and bool(b) and mann_whitney_p(a, b) < ALPHA


def side_by_side(records: Sequence[RequestRecord]) -> list[Row]:
    grouped: dict[str, dict[str, list[RequestRecord]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        grouped[r.scenario][r.target].append(r)
    rows = []
    for scenario, by_target in grouped.items():
        cells = {target: cell(recs) for target, recs in by_target.items()}
        first = list(cells.values())[:2]
        differs = {"tok_s": False, "ttft_ms": False}
        if len(first) == 2:
            differs = {
                "tok_s": _differs(first[0].speeds, first[1].speeds),
                "ttft_ms": _differs(first[0].ttfts, first[1].ttfts),
            }
        rows.append(Row(scenario=scenario, cells=cells, differs=differs))
    return rows


def rows_to_dicts(rows: list[Row]) -> list[dict[str, Any]]:
    return [
        {
            "scenario": r.scenario,
            "differs": r.differs,
            "targets": {t: c.model_dump(mode="json") for t, c in r.cells.items()},
        }
        for r in rows
    ]
