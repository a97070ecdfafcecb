"""Each load host's monotonic clock mapped onto the coordinator's, by round trips through its actor.

An exchange: the coordinator reads its clock (``t0``), asks the actor for its own (``remote``), reads its clock again
(``t3``). Whenever the actor read its clock, that instant lay between ``t0`` and ``t3`` on the coordinator's clock, so
``offset = remote - (t0 + t3) / 2`` is off by at most half the round trip: ``bound = (t3 - t0) / 2``. Of a burst, the
exchange with the shortest round trip is kept (the tightest bound). A reading ``r`` on the host is ``r - offset`` on
the coordinator's clock.

Records are mapped with the offset of the start; the bursts during the run say how far the offset moved since
(clock drift): the mapping's error bound covers each of them too (a later burst's distance from the start's offset
plus its own bound). Intervals inside one record (TTFT, ITL, TPOT, end-to-end) come from one
host's clock and need no mapping; only figures across records from several hosts do (:func:`unaligned`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from servelab.core.records import RequestRecord

BURST = 8  # exchanges per burst: the shortest round trip of them is kept
EVERY_S = 5.0  # a burst during the run this often
WINDOW_SHARE = 0.01  # an aggregate over a window needs the hosts aligned within this share of the window
SCRAPE_SHARE = 0.1  # the in-flight count at each engine scrape needs alignment within this share of the interval


@dataclass(frozen=True, slots=True)
class Exchange:
    """One round trip: the coordinator's clock before (``t0``) and after (``t3``), the host's clock between."""

    t0: int
    remote: int
    t3: int

    def __post_init__(self) -> None:
        if self.t3 < self.t0:
            raise ValueError(f"a round trip cannot end before it starts ({self.t0} -> {self.t3})")

    @property
    def offset_ns(self) -> int:
        return self.remote - (self.t0 + self.t3) // 2

    @property
    def bound_ns(self) -> int:
        return (self.t3 - self.t0 + 1) // 2  # rounded up: the integer midpoint is off by half a nanosecond at most


def best(burst: Sequence[Exchange]) -> Exchange:
    """The exchange with the shortest round trip (the tightest bound)."""
    if not burst:
        raise ValueError("a burst of no exchange says nothing of the clock")
    return min(burst, key=lambda e: e.t3 - e.t0)


@dataclass
class ClockMap:
    """One host's clock against the coordinator's: the start's offset (what records are mapped with) and the
    bursts since."""

    start: Exchange
    later: list[Exchange] = field(default_factory=list)

    @property
    def offset_ns(self) -> int:
        return self.start.offset_ns

    @property
    def drift_ns(self) -> int:
        """How far the later bursts' offsets moved from the start's (0 without a later burst)."""
        return max([0, *(abs(e.offset_ns - self.offset_ns) for e in self.later)])

    @property
    def bound_ns(self) -> int:
        """The error bound of a reading mapped with the start's offset, at any time of the run so far: the start's
        bound, or a later burst's distance from the start's offset plus that burst's own bound, whichever is more."""
        return max([self.start.bound_ns, *(abs(e.offset_ns - self.offset_ns) + e.bound_ns for e in self.later)])

    def to_coordinator(self, reading: int) -> int:
        return reading - self.offset_ns

    def to_host(self, reading: int) -> int:
        return reading + self.offset_ns

    def to_dict(self) -> dict[str, int]:
        return {
            "offset_ns": self.offset_ns,
            "bound_ns": self.bound_ns,
            "start_bound_ns": self.start.bound_ns,
            "drift_ns": self.drift_ns,
            "bursts": 1 + len(self.later),
        }


_STAMPS = tuple(f.name for f in fields(RequestRecord) if f.name.endswith("_ns") and f.name != "chunk_ns")


def mapped(record: RequestRecord, clock: ClockMap) -> RequestRecord:
    """The record with every stamp on the coordinator's clock (intervals inside it unchanged)."""
    moved: dict[str, Any] = {n: clock.to_coordinator(v) for n in _STAMPS if (v := getattr(record, n)) is not None}
    return replace(record, chunk_ns=[clock.to_coordinator(c) for c in record.chunk_ns], **moved)


def unaligned(bound_ns: int, window_ns: int, scrape_interval_s: float | None = None) -> list[str]:
    """The figures across hosts that need alignment finer than ``bound_ns``, each said with why: the aggregate
    rates over the step's active window (each edge off by the bound), and the client's in-flight count at each of the
    engine's scrapes (what the verdict sets against the engine's gauges)."""
    out = []
    if window_ns > 0 and 2 * bound_ns > WINDOW_SHARE * window_ns:
        out.append(
            f"aggregate rates: the hosts' clocks are aligned within ±{bound_ns / 1e6:.3g} ms, more than "
            f"{WINDOW_SHARE:.0%} of the {window_ns / 1e6:.4g} ms active window"
        )
    if scrape_interval_s is not None and bound_ns > SCRAPE_SHARE * scrape_interval_s * 1e9:
        out.append(
            f"in flight at each engine scrape: the hosts' clocks are aligned within ±{bound_ns / 1e6:.3g} ms, more "
            f"than {SCRAPE_SHARE:.0%} of the {scrape_interval_s * 1e3:g} ms between scrapes"
        )
    return out
