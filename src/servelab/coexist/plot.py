"""Chunk intervals per condition, as distributions a person can compare at a glance (PNG, no display needed)."""

from __future__ import annotations

import itertools
from pathlib import Path

from servelab.coexist import CoexistResult


def sharing_text(sharing: dict[str, object]) -> str:
    """``mps (LLM capped at 85% of SMs)`` and the like, for titles and tables."""
    text = str(sharing.get("mode", "?"))
    if "llm_active_thread_pct" in sharing:
        text += f" (LLM capped at {sharing['llm_active_thread_pct']}% of SMs)"
    if "probe_sms" in sharing:
        text += f" (probe in a green context of {sharing['probe_sms']} SMs)"
    return text


def plot_intervals(result: CoexistResult, path: Path) -> Path:
    """The chunk-interval plot as a PNG file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(interval_png(result))
    return path


def interval_png(result: CoexistResult) -> bytes:
    """One curve per condition: the share of chunk intervals above each value (log scale), p99 marked."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    for figs in result.conditions:
        gaps = sorted(
            (b.arrived_s - a.arrived_s) * 1000
            for u in result.utterances
            if u.condition == figs.condition
            for a, b in itertools.pairwise(u.chunks)
        )
        if not gaps:
            continue
        n = len(gaps)
        ax.step(gaps, [1 - i / n for i in range(n)], where="post", label=f"{figs.condition} (n={n})")
    ax.set_yscale("log")
    ax.set_xlabel("interval between chunks (ms)")
    ax.set_ylabel("share of intervals longer")
    ax.axhline(0.01, color="grey", linewidth=0.6, linestyle=":")
    ax.set_title(f"probe {result.probe.get('probe', '?')}, sharing {sharing_text(result.sharing)}")
    ax.legend()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()
