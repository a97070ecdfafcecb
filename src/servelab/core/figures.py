"""What a figure may be printed as, given the samples it rests on: one rule, which every printer goes through.

- A percentile is printed as one only when the samples reach past it on both sides: ``p`` needs at least
  ``1 / min(p, 1 - p)`` samples (p50 from 2, p90 from 10, p95 from 20, p99 from 100). With fewer, the furthest
  sample on its side is printed as what it is (``max 41.0``), with the count (``n=5``).
- An interval is printed only from ``MIN_INTERVAL`` samples; with fewer, the estimate with its count and the words
  ``too few for an interval``.
- A share (what the engine held of the requests' time, what the LLM kept of its rate alone) is never printed above
  100% as a fact: a ratio of two measured quantities can come out above 1 by noise alone. With an interval, a share
  whose interval reaches 100% is ``no measurable loss`` (``no measurable loss: 99% [93, 106]``, the bounds as
  measured); an estimate above 100% is printed as ``100%`` with the measured ratio as a multiple beside it
  (``100% (measured x1.06)``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from servelab.core.stats import Interval, quantile_interval

MIN_INTERVAL = 10  # samples an interval is printed from
TOO_FEW = "too few for an interval"


def min_samples(q: float) -> int:
    """Samples a percentile ``q`` (0..1) needs to be printed as one: at least one sample beyond it on each side."""
    if not 0 <= q <= 1:
        raise ValueError(f"a quantile is within 0..1, got {q}")
    tail = min(q, 1 - q)
    return 1 if tail <= 0 else math.ceil(round(1 / tail, 9))


def supports(n: int | None, q: float) -> bool:
    """Whether ``n`` samples support percentile ``q`` (0..1); an unknown count supports nothing."""
    return n is not None and n >= max(1, min_samples(q))


def fmt_number(value: float | None, digits: int = 1) -> str:
    """A number with thousands separators, ``-`` for none (or NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}"


@dataclass(frozen=True, slots=True)
class Figure:
    """A percentile (``q`` in 0..1) of ``n`` samples, with the furthest sample on its side (``extreme``: the max
    for an upper percentile) to print when ``n`` cannot support it."""

    q: float
    value: float | None
    n: int | None
    extreme: float | None = None

    @property
    def supported(self) -> bool:
        return self.value is not None and supports(self.n, self.q)

    def text(self, digits: int = 1, scale: float = 1.0, unit: str = "") -> str:
        """``41.2``; too few samples: ``max 41.0 (n=5)`` (a median: ``41.0 (n=1)``; no largest sample kept:
        ``too few (n=5)``); none: ``-``; an unknown count: ``41.2 (n?)``. ``unit`` follows the number."""
        if self.value is None or (isinstance(self.value, float) and math.isnan(self.value)) or self.n == 0:
            return "-"
        unit = f" {unit}" if unit else ""
        if self.n is None:
            return f"{fmt_number(self.value * scale, digits)}{unit} (n?)"
        if self.supported:
            return f"{fmt_number(self.value * scale, digits)}{unit}"
        if self.q == 0.5:  # a median of one sample is that sample: said with its count
            return f"{fmt_number(self.value * scale, digits)}{unit} (n={self.n})"
        if self.extreme is None:
            return f"too few (n={self.n})"
        side = "max" if self.q > 0.5 else "min"
        return f"{side} {fmt_number(self.extreme * scale, digits)}{unit} (n={self.n})"

    def labelled(self, digits: int = 1, unit: str = "") -> str:
        """With its name where it is one: ``p99 41.2 ms``, else as :meth:`text` says it (``max 41.0 ms (n=5)``)."""
        said = self.text(digits, unit=unit)
        return f"p{self.q * 100:g} {said}" if self.supported else said


def quantile_figure(samples: Sequence[float], q: float) -> Figure:
    """The percentile ``q`` (0..1) of raw samples as a :class:`Figure`."""
    if not samples:
        return Figure(q, None, 0)
    extreme = max(samples) if q >= 0.5 else min(samples)
    return Figure(q, quantile_interval(samples, q).value, len(samples), extreme)


def stored_figure(percentiles: Mapping[str, float], key: str, n: int | None, extreme: float | None = None) -> Figure:
    """A stored percentile (``{"p50": ..., "p99": ...}``, key ``"p99"``) as a :class:`Figure` with its count."""
    q = float(key.removeprefix("p")) / 100
    value = percentiles.get(key)
    return Figure(q, value if value is None else float(value), n, extreme)


def estimate_text(interval: Interval | None, n: int | None, digits: int = 1) -> str:
    """An estimate with its interval: ``39.2 [38.1, 40.3]``; from fewer than ``MIN_INTERVAL`` samples
    ``39.2 (n=5, too few for an interval)``; none: ``-``."""
    if interval is None or math.isnan(interval.estimate):
        return "-"
    value = fmt_number(interval.estimate, digits)
    if n is None or n < MIN_INTERVAL:
        return f"{value} (n={'?' if n is None else n}, {TOO_FEW})"
    return f"{value} [{fmt_number(interval.low, digits)}, {fmt_number(interval.high, digits)}]"


def proportion_text(k: int, n: int, low: float | None, high: float | None, sep: str = " ") -> str:
    """``7/12 58% [32, 81]`` (its Wilson interval); from fewer than ``MIN_INTERVAL``: ``3/5 60% (too few for an
    interval)``; none asked: ``-``."""
    if not n:
        return "-"
    said = f"{k}/{n} {k / n:.0%}"
    if n < MIN_INTERVAL or low is None or high is None:
        return f"{said}{sep}({TOO_FEW})"
    return f"{said}{sep}[{low * 100:.0f}, {high * 100:.0f}]"


@dataclass(frozen=True, slots=True)
class Share:
    """A measured share (0..1 when all is well), possibly above 1 by noise, with its interval where one exists."""

    estimate: float
    low: float | None = None
    high: float | None = None

    @property
    def shown(self) -> float:
        """The share as printed: never above 1."""
        return min(self.estimate, 1.0)

    @property
    def no_measurable_loss(self) -> bool:
        """The interval reaches 100%: the samples cannot tell it from no loss."""
        return self.high is not None and self.high >= 1.0

    def text(self) -> str:
        """``87% [80, 93]``; an interval reaching 100%: ``no measurable loss: 99% [93, 106]``; no interval: ``87%``;
        above 100% with no interval reaching it: ``100% (measured x1.06)``, the ratio as a multiple, not a share."""
        pct = f"{self.shown:.0%}"
        if self.low is None or self.high is None:
            return pct if self.estimate <= 1.0 else f"{pct} (measured x{self.estimate:.2f})"
        if self.low > 1.0:
            return f"{pct} (measured x{self.estimate:.2f} [{self.low:.2f}, {self.high:.2f}])"
        bounds = f"[{self.low * 100:.0f}, {self.high * 100:.0f}]"
        return f"no measurable loss: {pct} {bounds}" if self.no_measurable_loss else f"{pct} {bounds}"


def share_text(value: float | None, low: float | None = None, high: float | None = None) -> str:
    """A share as :class:`Share` prints it; ``-`` for none."""
    if value is None or math.isnan(value):
        return "-"
    return Share(value, low, high).text()


def pct_text(value: float | None) -> str:
    """A share with no interval, never printed above 100% (``100% (measured x1.06)``); ``-`` for none."""
    return share_text(value)


def ratio_interval(
    values: Sequence[float], alone: Sequence[float], *, resamples: int = 2000, seed: int = 0
) -> Interval | None:
    """The ratio of two means (``values`` beside a load over ``alone``) with a 95% percentile-bootstrap interval,
    each side resampled on its own; None when either side has fewer than 2 samples or ``alone`` averages 0."""
    import numpy as np

    a, b = np.asarray(values, dtype=float), np.asarray(alone, dtype=float)
    if a.size < 2 or b.size < 2 or b.mean() <= 0:
        return None
    rng = np.random.default_rng(seed)
    ra = a[rng.integers(0, a.size, size=(resamples, a.size))].mean(axis=1)
    rb = b[rng.integers(0, b.size, size=(resamples, b.size))].mean(axis=1)
    ratios = ra[rb > 0] / rb[rb > 0]
    low, high = np.percentile(ratios, [2.5, 97.5])
    return Interval(float(a.mean() / b.mean()), float(low), float(high))
