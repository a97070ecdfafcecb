"""Statistics computed from raw samples: percentiles (one definition everywhere: linear interpolation between
order statistics, numpy's default), quantile intervals from order statistics, Wilson and bootstrap intervals,
McNemar."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

Z95 = 1.959963984540054


@dataclass(frozen=True, slots=True)
class Interval:
    estimate: float
    low: float
    high: float

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high


def percentile(samples: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of raw samples, linear interpolation between order statistics.

    Same definition as numpy's default and Excel's PERCENTILE.INC. NaN for no samples.
    """
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    if len(samples) == 0:
        return math.nan
    return float(np.percentile(np.asarray(samples, dtype=float), q))


def percentiles(samples: Sequence[float], qs: Sequence[float] = (50, 90, 95, 99)) -> dict[str, float]:
    """``{"p50": ..., "p90": ...}`` from the same raw samples."""
    return {f"p{q:g}": percentile(samples, q) for q in qs}


def wilson_interval(successes: int, n: int, z: float = Z95) -> Interval:
    """Wilson score interval for a proportion k/n (95% by default)."""
    if n < 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got {successes}/{n}")
    if n == 0:
        return Interval(math.nan, 0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return Interval(p, low, high)


def bootstrap_median_interval(
    samples: Sequence[float], *, confidence: float = 0.95, resamples: int = 10_000, seed: int = 0
) -> Interval:
    """Percentile-bootstrap interval for the median; seeded, so the same samples give the same interval."""
    data = np.asarray(samples, dtype=float)
    if data.size == 0:
        return Interval(math.nan, math.nan, math.nan)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, data.size, size=(resamples, data.size))
    medians = np.median(data[picks], axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(medians, [tail, 100 - tail])
    return Interval(float(np.median(data)), float(low), float(high))


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value from the discordant pairs.

    ``only_a``: items A got right and B wrong; ``only_b``: the reverse. Under H0 each discordant
    pair is a fair coin, so p = min(1, 2 * P(X <= min(b, c))), X ~ Binomial(b + c, 1/2).
    """
    if only_a < 0 or only_b < 0:
        raise ValueError("discordant counts must be >= 0")
    n = only_a + only_b
    if n == 0:
        return 1.0
    k = min(only_a, only_b)
    tail: float = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def _u_statistic(a: Sequence[float], b: Sequence[float]) -> float:
    """Mann-Whitney U of ``a``: pairs where a wins, ties counting a half."""
    return sum(1.0 if x > y else 0.5 if x == y else 0.0 for x in a for y in b)


def _exact_u_counts(m: int, n: int) -> list[int]:
    """Number of orderings of m a's and n b's (no ties) giving each U = 0..m*n."""
    # counts[i][j] = distribution for i a's and j b's; U grows by j when an a is placed after j b's
    table: dict[tuple[int, int], list[int]] = {}
    for i in range(m + 1):
        for j in range(n + 1):
            if i == 0 or j == 0:
                table[i, j] = [1] + [0] * (i * j)
                continue
            dist = [0] * (i * j + 1)
            for u, c in enumerate(table[i - 1, j]):  # largest value is an a: it beats all j b's
                dist[u + j] += c
            for u, c in enumerate(table[i, j - 1]):  # largest value is a b
                dist[u] += c
            table[i, j] = dist
    return table[m, n]


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided Mann-Whitney U test p-value: exact without ties for small samples, else normal with
    tie correction. With 3 against 3 the smallest possible p is 0.1: too few samples never 'differ'."""
    m, n = len(a), len(b)
    if m == 0 or n == 0:
        return 1.0
    u = _u_statistic(a, b)
    ties = len(set(a) | set(b)) < m + n
    if not ties and m * n <= 2500:
        counts = _exact_u_counts(m, n)
        total = sum(counts)
        low = min(u, m * n - u)
        tail = sum(counts[: int(low) + 1]) / total
        return min(1.0, 2 * tail)
    mean = m * n / 2
    values = sorted(list(a) + list(b))
    tie_term = sum(c**3 - c for c in (values.count(v) for v in set(values)))
    var = m * n / 12 * ((m + n + 1) - tie_term / ((m + n) * (m + n - 1)))
    if var <= 0:
        return 1.0
    z = (abs(u - mean) - 0.5) / math.sqrt(var)
    return min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2)))


@dataclass(frozen=True, slots=True)
class Quantile:
    q: float
    value: float | None
    low: float | None
    high: float | None  # None: too few samples for an upper bound at this confidence
    n: int


def _binom_cdf(n: int, p: float) -> list[float]:
    """[P(X <= k) for k in 0..n], X ~ Binomial(n, p), from log-space probabilities."""
    lp, lq, ln = math.log(p), math.log1p(-p), math.lgamma(n + 1)
    out, total = [], 0.0
    for k in range(n + 1):
        total += math.exp(ln - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * lp + (n - k) * lq)
        out.append(min(total, 1.0))
    return out


def quantile_interval(samples: Sequence[float], q: float, confidence: float = 0.95) -> Quantile:
    """The ``q`` quantile (0 < q < 1; the value as :func:`percentile` gives it) with an interval between two order
    statistics that holds the true quantile with at least ``confidence``, whatever the distribution (the
    binomial distribution of how many samples fall below it)."""
    xs = sorted(samples)
    n = len(xs)
    if n == 0:
        return Quantile(q, None, None, None, 0)
    value = percentile(xs, q * 100)  # the one definition: linear interpolation
    alpha, cdf = (1 - confidence) / 2, _binom_cdf(n, q)
    # X = how many samples fall below the true quantile. The r-th smallest sample is below it unless X < r:
    # the largest r with P(X <= r - 1) <= alpha. The s-th is above it unless X >= s: the smallest s with
    # P(X >= s) = 1 - P(X <= s - 1) <= alpha.
    low_rank = max((r for r in range(1, n + 1) if cdf[r - 1] <= alpha), default=0)
    high_rank = min((s for s in range(1, n + 1) if 1 - cdf[s - 1] <= alpha), default=n + 1)
    low = xs[low_rank - 1] if low_rank >= 1 else None
    high = xs[high_rank - 1] if high_rank <= n else None
    return Quantile(q, value, low, high, n)
