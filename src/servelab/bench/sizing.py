"""How many requests a step needs to answer its question, and whether the step it ran had enough to be judged.

- A closed loop at concurrency c holds c in flight only until its last requests are sent; with ``HOLD_WAVES``
  requests per stream it holds them for most of the step (all but the last wave's tail).
- An SLO level is judged on its share of good requests: with ``SLO_MISSES`` misses allowed at the target share,
  one slow request does not decide a level (a 90% target: 20 requests; 95%: 40; 99%: 200).
- A verdict needs evidence: a step with no successful request, or a closed loop that never had its concurrency in
  flight, gets none (it says why instead).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from servelab.core.records import RequestRecord
from servelab.load.arrivals import ClosedLoop, arrivals_for
from servelab.load.runner import Load
from servelab.load.scenarios import Scenario

DEFAULT_REQUESTS = 5  # measured requests per step when none are asked (a concurrent step: HOLD_WAVES per stream)
HOLD_WAVES = 4  # requests per stream of a closed loop: its streams full for most of the step
SLO_MISSES = 2  # misses an SLO level can hold at its target share


def hold_requests(concurrency: int) -> int:
    """Requests a closed loop at ``concurrency`` sends to hold it for most of the step."""
    return HOLD_WAVES * max(1, concurrency)


def sized(load: Load, scenario: Scenario) -> Load:
    """The load a step runs: a closed loop's ``requests`` raised to ``per_stream`` per stream where it asks for it
    (the default of ``bench`` and ``check``: ``HOLD_WAVES``); an explicit count stays as given."""
    pattern = arrivals_for(load, scenario)
    if not load.per_stream or load.requests is None or not isinstance(pattern, ClosedLoop):
        return load
    return replace(load, requests=max(load.requests, load.per_stream * pattern.concurrency))


def slo_requests(attainment: float, level: int = 1) -> int:
    """Requests an SLO level needs: ``SLO_MISSES`` misses allowed at the target share, and the level's streams
    held for most of the step."""
    misses = math.ceil(round(SLO_MISSES / (1 - attainment), 6)) if attainment < 1 else 1000
    return max(misses, hold_requests(level))


def max_in_flight(records: Sequence[RequestRecord]) -> int:
    """The most requests in flight at once (sent to end; an end counted before a send at the same instant)."""
    spans = [(r.sent_ns, r.end_ns) for r in records if r.sent_ns is not None and r.end_ns is not None]
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    most = now = 0
    for _, change in events:
        now += change
        most = max(most, now)
    return most


def no_verdict(records: Sequence[RequestRecord], concurrency: int | None) -> str | None:
    """Why a step's records cannot say what limited it, or None when they can: no verdict for a step with no
    successful request (no load ran to be limited) or a closed loop too short to hold its ``concurrency`` (fewer
    requests than :func:`hold_requests`) that never had it in flight (what it measured was not that load). A step
    long enough that still never had its streams in flight is judged: what kept them empty (a starved client, say)
    is the verdict's question."""
    if not records:
        return "no verdict: nothing was measured"
    if not any(r.ok for r in records):
        return f"no verdict: none of its {len(records)} requests succeeded, so no load ran to be limited"
    most = max_in_flight(records)
    if concurrency is not None and concurrency > 1 and most < concurrency and len(records) < hold_requests(concurrency):
        return (
            f"no verdict: it never had its {concurrency} streams in flight (at most {most}, over {len(records)} "
            f"requests): too short to judge; at least {hold_requests(concurrency)} requests hold them (--requests)"
        )
    return None
