"""Rich tables for a person, from summaries (dicts as stored)."""

from __future__ import annotations

import math
from typing import Any

from rich.table import Table


def fmt(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def summary_table(title: str, s: dict[str, Any]) -> Table:
    """One level's figures: TTFT, inter-chunk gaps, TPOT, tok/s, errors."""
    table = Table("figure", "p50", "p90", "p99", title=f"{title}: {s['ok']}/{s['requests']} ok", title_justify="left")
    for label, key in (
        ("TTFT (ms)", "ttft_ms"),
        ("TTFT content (ms)", "ttft_content_ms"),
        ("TTFT from scheduled (ms)", "ttft_from_scheduled_ms"),
        ("inter-chunk gap (ms)", "itl_ms"),
        ("TPOT (ms)", "tpot_ms"),
        ("per-stream tok/s", "stream_tok_s"),
    ):
        row = s.get(key) or {}
        table.add_row(label, fmt(row.get("p50")), fmt(row.get("p90")), fmt(row.get("p99")))
    table.caption = (
        f"aggregate {fmt(s.get('aggregate_tok_s'))} tok/s over the active window {fmt(s.get('active_window_s'), 2)} s; "
        f"{s.get('output_tokens', 0)} output tokens; {s.get('samples', {}).get('itl', 0)} gaps"
        + (f"; errors {s['errors']}" if s.get("errors") else "")
    )
    return table
