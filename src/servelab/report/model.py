"""What a report holds, independent of how it is written: per run a section of tables, plots and verdict lines.

A verdict is one short sentence, said once; what it rests on (the figures, the reasons) is its evidence, folded
beneath it wherever it is written. A percentile or an interval is shown only where its samples can support it
(:data:`P99_MIN`, :data:`INTERVAL_MIN`); below that the figure says it rests on too few, with its n."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

P99_MIN = 100  # a p99 from fewer samples is the largest value or next to it, not a tail
INTERVAL_MIN = 10  # a 95% interval from fewer samples spans nearly all of them


@dataclass
class Table:
    caption: str
    headers: list[str]
    rows: list[list[str]]  # a cell may hold several lines
    note: str = ""  # how to read it, under the table
    bar: list[tuple[str, float]] = field(default_factory=list)  # parts of a whole (label, share): drawn as one bar
    anchors: dict[str, str] = field(default_factory=dict)  # a cell's whole text -> where it links (#run-ID)


@dataclass
class Plot:
    caption: str
    png: bytes


@dataclass
class Section:
    run_id: str
    kind: str
    title: str
    status: str
    manifest: dict[str, Any] = field(default_factory=dict)
    tables: list[Table] = field(default_factory=list)
    plots: list[Plot] = field(default_factory=list)
    verdicts: list[str] = field(default_factory=list)  # one short sentence each
    problems: list[str] = field(default_factory=list)  # what failed or was cut short
    facts: list[tuple[str, str]] = field(default_factory=list)  # what was measured: model, target, hardware, ...
    evidence: dict[str, str] = field(default_factory=dict)  # a verdict -> what it rests on
    not_drawn: list[str] = field(default_factory=list)  # plots left out, with why (too few samples)
    result: Any = None  # the run's typed result (the answer tables read it), None for a run without one


def say(out: Section, verdict: str, evidence: str = "") -> None:
    """Add a verdict once (a second identical one adds its evidence to the first's)."""
    if verdict not in out.verdicts:
        out.verdicts.append(verdict)
    if evidence:
        before = out.evidence.get(verdict)
        out.evidence[verdict] = f"{before}\n{evidence}" if before and evidence not in before else evidence


def fmt(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "—"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def tail(value: float | None, n: int, digits: int = 1) -> str:
    """A p99 where ``n`` samples support one, else "too few" (a p99 of 3 samples is their maximum); the caller
    shows the n beside it."""
    return fmt(value, digits) if n >= P99_MIN else "too few"


def can_differ(n_a: int, n_b: int, alpha: float = 0.05) -> bool:
    """Whether two samples this small can differ at all at ``alpha``: the smallest two-sided p of a Mann-Whitney U
    test is 2 / C(n_a + n_b, n_a) (3 against 3: 0.1, never below 0.05)."""
    return n_a > 0 and n_b > 0 and 2 / math.comb(n_a + n_b, n_a) < alpha


def add_plot(out: Section, caption: str, png: bytes | None, left_out: list[str] | None = None) -> None:
    """The plot, if one was drawn; ``left_out``: series not drawn for too few samples, said under the plots."""
    if png:
        out.plots.append(Plot(caption, png))
    if left_out:
        what = "not drawn" if png else "no plot"
        out.not_drawn.append(f"{caption}: {what} for {', '.join(left_out)}: too few samples to draw a distribution")
