"""Chunk intervals per condition, as distributions a person can compare at a glance (PNG, no display needed)."""

from __future__ import annotations

import itertools
from pathlib import Path

from servelab.coexist import CoexistResult
from servelab.report.coexist_view import sharing_text
from servelab.report.plots import survival


def plot_intervals(result: CoexistResult, path: Path) -> Path | None:
    """The chunk-interval plot as a PNG file; None when no chunk arrived (nothing to draw)."""
    png = interval_png(result)
    if png is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png)
    return path


def interval_png(result: CoexistResult) -> bytes | None:
    """One curve per condition and probe: the share of chunk intervals above each value (log scale), p99 marked."""
    title = f"probe {result.probe.get('probe', '?')}, sharing {sharing_text(result.sharing)}"
    gaps = interval_series(result)
    return survival(gaps, "interval between chunks (ms)", title, ylabel="share of intervals longer", mark=0.01)


def interval_series(result: CoexistResult) -> dict[str, list[float]]:
    """Chunk intervals (ms) per condition, and per probe where several ran (a voice's and an avatar's apart)."""
    several = len({f.probe for f in result.conditions if f.probe}) > 1
    return {
        f"{figs.condition} ({figs.probe})" if several else figs.condition: [
            (b.arrived_s - a.arrived_s) * 1000
            for u in result.utterances
            if u.condition == figs.condition and u.probe in (figs.probe, "")
            for a, b in itertools.pairwise(u.chunks)
        ]
        for figs in result.conditions
        if figs.probe or not several
    }
