"""Quantile intervals from order statistics: coverage and the sample sizes where p99 has no upper bound."""

import random

from servelab.core.stats import percentile, quantile_interval


def test_p99_has_no_upper_bound_on_few_samples() -> None:
    assert quantile_interval([float(i) for i in range(300)], 0.99).high is None
    big = quantile_interval([float(i) for i in range(1000)], 0.99)
    assert big.high is not None and big.low is not None and big.low <= big.value <= big.high  # type: ignore[operator]


def test_interval_covers_the_true_quantile_at_least_95_percent() -> None:
    rng = random.Random(7)
    covered = 0
    for _ in range(400):
        xs = [rng.expovariate(1.0) for _ in range(1000)]
        q = quantile_interval(xs, 0.99)
        true = 4.605170185988091  # -ln(0.01)
        covered += q.low is not None and q.high is not None and q.low <= true <= q.high
    assert covered / 400 >= 0.93


def test_empty() -> None:
    assert quantile_interval([], 0.5).value is None


def test_one_percentile_definition_for_bench_and_coexist() -> None:
    """A coexist p99 and a bench p99 of the same samples are the same number (linear interpolation)."""
    rng = random.Random(3)
    for n in (1, 2, 7, 100, 333):
        xs = [rng.lognormvariate(0, 1) for _ in range(n)]
        for q in (0.5, 0.9, 0.99):
            assert quantile_interval(xs, q).value == percentile(xs, q * 100)
    assert quantile_interval([1.0, 2.0, 3.0, 4.0], 0.5).value == 2.5  # not nearest-rank's 2.0
