"""Service-level objectives: which requests are good, and the highest load that keeps enough of them good."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from servelab.core.errors import UsageError
from servelab.core.known_keys import nearest
from servelab.core.records import RequestRecord
from servelab.core.summary import e2e_ms, inter_chunk_gaps_ms, tpot_ms, ttft_ms

_UNITS = {"ms": 1.0, "s": 1000.0}
# itl bounds every gap between a request's chunks, the per-gap inter-token latency GuideLLM and vllm bench report as
# ITL; tpot bounds the request's mean time per output token (vllm bench's goodput tpot). Two limits, never one.
_KEYS = ("ttft", "itl", "tpot", "e2e")


@dataclass(frozen=True, slots=True)
class SLO:
    """Limits in milliseconds per request; ``attainment`` is the share of requests that must be good."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None  # "tpot=": the request's mean time per output token after the first
    e2e_ms: float | None = None
    attainment: float = 0.9
    itl_ms: float | None = None  # "itl=": every gap between the request's chunks (its longest within the limit)
    turns: str = "all"  # sessions: "warm" judges only a session's later turns (its first is a cold prefill by design)

    def judged(self, records: Sequence[RequestRecord]) -> list[RequestRecord]:
        """The records the SLO is held against: all, or with ``turns="warm"`` those past a session's first turn
        (a record with no turn label is always judged: the filter never empties a non-session step)."""
        if self.turns != "warm":
            return list(records)
        return [r for r in records if r.labels.turn is None or r.labels.turn > 1]

    def good(self, record: RequestRecord) -> bool:
        """Errors are never good (goodput counts them as failures)."""
        if not record.ok:
            return False
        checks = ((self.ttft_ms, ttft_ms(record)), (self.tpot_ms, tpot_ms(record)), (self.e2e_ms, e2e_ms(record)),
                  (self.itl_ms, _longest_gap(record)))  # fmt: skip
        return all(limit is None or (value is not None and value <= limit) for limit, value in checks)

    def attained(self, records: Sequence[RequestRecord]) -> float:
        judged = self.judged(records)
        return sum(self.good(r) for r in judged) / len(judged) if judged else 0.0

    def met(self, records: Sequence[RequestRecord]) -> bool:
        return bool(self.judged(records)) and self.attained(records) >= self.attainment

    def limits(self) -> dict[str, float | None]:
        """The limits as stored with a run (``ttft_ms``, ``itl_ms``, ``tpot_ms``, ``e2e_ms``)."""
        return {"ttft_ms": self.ttft_ms, "itl_ms": self.itl_ms, "tpot_ms": self.tpot_ms, "e2e_ms": self.e2e_ms}


def _longest_gap(record: RequestRecord) -> float | None:
    """A request with one chunk has no gap: nothing to hold against an ITL limit (0)."""
    return max(inter_chunk_gaps_ms(record), default=0.0) if record.chunk_ns else None


TURNS = ("all", "warm")


def check_turns(turns: str) -> str:
    """``--slo-turns``: the turns of a session step an SLO judges, all or warm."""
    if turns not in TURNS:
        raise UsageError(f"--slo-turns is all or warm, got {turns!r}")
    return turns


def parse_slo(text: str, attainment: float = 0.9, turns: str = "all") -> SLO:
    """'ttft=300ms,itl=50ms' → SLO(ttft_ms=300, itl_ms=50); each limit a positive finite time, each key once;
    ``turns`` all or warm."""
    limits: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = (x.strip() for x in part.partition("="))
        if not sep or key not in _KEYS:
            guess = nearest(key, _KEYS) if sep else None
            said = f"cannot read SLO {part!r}" + (f": unknown limit {key!r}; did you mean {guess!r}?" if guess else "")
            raise UsageError(said, hint="limits ttft, itl (every gap), tpot (the mean), e2e: like ttft=300ms,itl=50ms")
        if key in limits:
            raise UsageError(f"SLO {text!r} gives {key} twice", hint="one limit per key")
        limits[key] = _time_ms(value, key)
    if not limits:
        raise UsageError("an SLO needs at least one limit", hint="like ttft=300ms,itl=50ms")
    if not 0 < attainment <= 1 or not math.isfinite(attainment):
        raise UsageError(f"the SLO attainment is a share above 0 and at most 1, not {attainment:g}", hint="like 0.9")
    get = limits.get
    return SLO(ttft_ms=get("ttft"), tpot_ms=get("tpot"), e2e_ms=get("e2e"), attainment=attainment, itl_ms=get("itl"),
               turns=check_turns(turns))  # fmt: skip


def _time_ms(value: str, key: str) -> float:
    unit = next((u for u in sorted(_UNITS, key=len, reverse=True) if value.endswith(u)), "ms")
    try:
        ms = float(value.removesuffix(unit)) * _UNITS[unit]
    except ValueError:
        raise UsageError(f"SLO {key}: cannot read a time from {value!r}", hint="like 300ms or 2s") from None
    if not math.isfinite(ms) or ms <= 0:
        raise UsageError(f"SLO {key}: a limit is a time above 0, not {value!r}", hint="like 300ms or 2s")
    return ms


@dataclass
class Search:
    """The levels tried, in order, with their attainment; ``best`` the highest level that met the SLO.
    ``over`` says what the level is: a concurrency or a request rate."""

    tried: list[tuple[float, float, bool]] = field(default_factory=list)
    best: float | None = None
    over: str = "concurrency"


def search_max_level(
    run_level: Callable[[int], Sequence[RequestRecord]],
    slo: SLO,
    limit: int,
    on_attempt: Callable[[Search], None] | None = None,
) -> Search:
    """Double the concurrency until the SLO fails (or ``limit``), then bisect between the last pass and the fail.
    ``on_attempt`` sees the search after every level (a search cut short keeps the levels it tried)."""
    return _search(lambda level: run_level(int(level)), slo, 1, limit, lambda low, high: high - low <= 1,
                   "concurrency", on_attempt)  # fmt: skip


def search_max_rate(
    run_rate: Callable[[float], Sequence[RequestRecord]],
    slo: SLO,
    start: float,
    limit: float,
    precision: float = 0.1,
    on_attempt: Callable[[Search], None] | None = None,
) -> Search:
    """Double the request rate from ``start`` until the SLO fails (or ``limit``), then bisect until the pass and
    the fail are within ``precision`` of each other (relative)."""
    return _search(run_rate, slo, start, limit, lambda low, high: high - low <= precision * high, "rate", on_attempt)


def _search(
    run: Callable[[float], Sequence[RequestRecord]],
    slo: SLO,
    start: float,
    limit: float,
    close_enough: Callable[[float, float], bool],
    over: str,
    on_attempt: Callable[[Search], None] | None = None,
) -> Search:
    search = Search(over=over)
    integral = over == "concurrency"

    def attempt(level: float) -> bool:
        records = run(level)
        ok = slo.met(records)
        search.tried.append((level, slo.attained(records), ok))
        if ok and (search.best is None or level > search.best):
            search.best = level
        if on_attempt:
            on_attempt(search)
        return ok

    level, failed = start, None
    while level <= limit:
        if not attempt(level):
            failed = level
            break
        level *= 2
    if search.best is None or search.best == limit:
        return search  # even the first level fails, or the limit passes
    low = search.best
    high = failed if failed is not None else limit + (1 if integral else 0)
    if failed is None and not integral:
        if attempt(limit):
            return search
        high = limit
    while not close_enough(low, high):
        mid: float = (low + high) // 2 if integral else round((low + high) / 2, 6)
        if attempt(mid):
            low = mid
        else:
            high = mid
    return search
