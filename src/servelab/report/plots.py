"""The report's plots as PNG bytes (matplotlib, Agg): distributions as survival curves on a log scale, so the
tail a person cares about is visible. Every curve says its n in the legend and carries its 95% band (the DKW
bound, distribution-free); a series of fewer than :data:`INTERVAL_MIN` samples is not drawn (the caller says so,
from :func:`too_few`)."""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from servelab.report.model import INTERVAL_MIN

DKW_ALPHA = 0.05
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
    """Per series, the share of values above x (log y) with its 95% band: medians and tails side by side; ``mark``
    draws a dotted line at that share (0.01: where p99 is read) where some series has the samples to read it."""
    drawn = {k: sorted(v) for k, v in series.items() if len(v) >= INTERVAL_MIN}
    if not drawn:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    for name, values in drawn.items():
        n = len(values)
        shares = [1 - i / n for i in range(n)]
        (line,) = ax.step(values, shares, where="post", label=f"{name} (n={n})")
        eps = math.sqrt(math.log(2 / DKW_ALPHA) / (2 * n))
        low, high = [max(y - eps, 0.5 / n) for y in shares], [min(y + eps, 1.0) for y in shares]
        ax.fill_between(values, low, high, step="post", color=line.get_color(), alpha=0.15, linewidth=0)
    ax.set_yscale("log")
    if mark is not None and max(len(v) for v in drawn.values()) * mark >= 1:
        ax.axhline(mark, color="grey", linewidth=0.6, linestyle=":")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    return _png(fig)


def too_few(series: Mapping[str, Sequence[object]]) -> list[str]:
    """The series :func:`survival` leaves out, each with its n (``sim/code-chat (n=3)``)."""
    return [f"{k} (n={len(v)})" for k, v in series.items() if 0 < len(v) < INTERVAL_MIN]


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


def scatter(series: Mapping[str, Sequence[tuple[float, float]]], xlabel: str, ylabel: str, title: str) -> bytes | None:
    """Points, one colour per series (a request each: TTFT against its prompt's length)."""
    drawn = {k: v for k, v in series.items() if v}
    if not drawn:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    for name, points in drawn.items():
        ax.scatter([p[0] for p in points], [p[1] for p in points], s=9, label=name)
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
