"""The report's plots as PNG bytes (matplotlib, Agg): distributions as survival curves on a log scale, so the
tail a person cares about is visible."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

matplotlib.rcParams["text.parse_math"] = False  # no label is read as mathtext: names are user text


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def survival(
    series: Mapping[str, Sequence[float]],
    xlabel: str,
    title: str,
    *,
    ylabel: str = "share above",
    mark: float | None = None,
) -> bytes | None:
    """Per series, the share of values above x (log y): medians and tails side by side; ``mark`` draws a dotted
    line at that share (0.01: where p99 is read)."""
    drawn = {k: sorted(v) for k, v in series.items() if v}
    if not drawn:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    for name, values in drawn.items():
        n = len(values)
        ax.step(values, [1 - i / n for i in range(n)], where="post", label=f"{name} (n={n})")
    ax.set_yscale("log")
    if mark is not None:
        ax.axhline(mark, color="grey", linewidth=0.6, linestyle=":")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    return _png(fig)


def lines(series: Mapping[str, Sequence[tuple[float, float]]], xlabel: str, ylabel: str, title: str) -> bytes | None:
    """One line per series of (x, y) points: throughput against concurrency, an SLO curve, a /metrics series."""
    drawn = {k: sorted(v) for k, v in series.items() if v}
    if not drawn:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    for name, points in drawn.items():
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", markersize=3, label=name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    return _png(fig)


def bars(values: Mapping[str, Mapping[str, float]], ylabel: str, title: str) -> bytes | None:
    """Grouped bars: per group (a target) one bar per key (an outcome)."""
    if not values:
        return None
    keys = sorted({k for v in values.values() for k in v})
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    width = 0.8 / max(1, len(values))
    for i, (group, counts) in enumerate(values.items()):
        ax.bar([j + i * width for j in range(len(keys))], [counts.get(k, 0) for k in keys], width, label=group)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(keys))], keys, rotation=20, fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    return _png(fig)
