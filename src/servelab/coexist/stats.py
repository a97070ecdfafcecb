"""Quantiles with a distribution-free confidence interval (order statistics and the binomial distribution), so a
p99 says how many samples it rests on and how far it could be off."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


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
    """The ``q`` quantile (0 < q < 1) with an interval between two order statistics that holds the true quantile
    with at least ``confidence``, whatever the distribution."""
    xs = sorted(samples)
    n = len(xs)
    if n == 0:
        return Quantile(q, None, None, None, 0)
    value = xs[min(n - 1, max(0, math.ceil(q * n) - 1))]
    alpha, cdf = (1 - confidence) / 2, _binom_cdf(n, q)
    # X = how many samples fall below the true quantile. The r-th smallest sample is below it unless X < r:
    # the largest r with P(X <= r - 1) <= alpha. The s-th is above it unless X >= s: the smallest s with
    # P(X >= s) = 1 - P(X <= s - 1) <= alpha.
    low_rank = max((r for r in range(1, n + 1) if cdf[r - 1] <= alpha), default=0)
    high_rank = min((s for s in range(1, n + 1) if 1 - cdf[s - 1] <= alpha), default=n + 1)
    low = xs[low_rank - 1] if low_rank >= 1 else None
    high = xs[high_rank - 1] if high_rank <= n else None
    return Quantile(q, value, low, high, n)
