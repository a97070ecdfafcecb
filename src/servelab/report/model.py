"""What a report holds, independent of how it is written: per run a section of tables, plots and verdict lines."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Table:
    caption: str
    headers: list[str]
    rows: list[list[str]]  # a cell may hold several lines
    note: str = ""  # how to read it, under the table


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
    verdicts: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # what failed or was cut short
    facts: list[tuple[str, str]] = field(default_factory=list)  # what was measured: model, target, hardware, ...


def fmt(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "—"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def add_plot(out: Section, caption: str, png: bytes | None) -> None:
    if png:
        out.plots.append(Plot(caption, png))
