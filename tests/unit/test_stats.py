import math

import numpy as np
import pytest

from servelab.core.stats import bootstrap_median_interval, mcnemar_exact, percentile, percentiles, wilson_interval


def test_percentile_known_values() -> None:
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile(list(range(1, 11)), 90) == pytest.approx(9.1)
    assert percentile([5.0], 99) == 5.0
    assert math.isnan(percentile([], 50))
    assert percentiles([10, 20, 30, 40, 50]) == {"p50": 30, "p90": 46, "p95": 48, "p99": pytest.approx(49.6)}


def test_percentile_rejects_out_of_range() -> None:
    with pytest.raises(ValueError):
        percentile([1], 101)


def test_percentile_from_raw_samples_differs_from_averaged_averages() -> None:
    fast, slow = [10.0] * 99, [1000.0]
    assert percentile(fast + slow, 99) > 10.0


def test_wilson_known_values() -> None:
    iv = wilson_interval(8, 10)
    assert (iv.low, iv.high) == (pytest.approx(0.4902, abs=1e-4), pytest.approx(0.9433, abs=1e-4))
    zero = wilson_interval(0, 10)
    assert zero.low == 0.0 and zero.high == pytest.approx(0.2775, abs=1e-4)
    full = wilson_interval(28, 28)
    assert full.high == 1.0 and full.low == pytest.approx(0.8794, abs=1e-4)


def test_wilson_rejects_bad_counts() -> None:
    with pytest.raises(ValueError):
        wilson_interval(11, 10)


def test_mcnemar_exact_known_values() -> None:
    assert mcnemar_exact(1, 9) == pytest.approx(0.021484375)
    assert mcnemar_exact(9, 1) == pytest.approx(0.021484375)
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(3, 3) == 1.0
    assert mcnemar_exact(0, 5) == pytest.approx(0.0625)


def test_bootstrap_median_interval_matches_theory_and_is_seeded() -> None:
    rng = np.random.default_rng(1)
    data = rng.normal(0, 1, 400).tolist()
    iv = bootstrap_median_interval(data, resamples=4000)
    assert iv.contains(iv.estimate)
    expected_width = 2 * 1.96 * 1.2533 / math.sqrt(400)  # asymptotic SE of the median
    assert (iv.high - iv.low) == pytest.approx(expected_width, rel=0.3)
    assert bootstrap_median_interval(data, resamples=4000) == iv


def test_mann_whitney_exact_known_values() -> None:
    from servelab.core.stats import mann_whitney_p

    # complete separation, 3 vs 3: one ordering of C(6,3)=20 in each tail -> p = 2/20
    assert mann_whitney_p([1, 2, 3], [4, 5, 6]) == pytest.approx(0.1)
    # 5 vs 5 separated: 2/252
    assert mann_whitney_p([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == pytest.approx(2 / 252)
    assert mann_whitney_p([1, 3, 5], [2, 4, 6]) > 0.5
    # scipy.stats.mannwhitneyu(..., alternative="two-sided"): ties -> normal with tie and continuity correction
    assert mann_whitney_p([1, 2, 3, 4], [3, 4, 5, 6]) == pytest.approx(0.1080634, abs=1e-6)
    a, b = [1.5, 2.5, 3.1, 7, 8, 9.5, 10, 11], [4, 5, 6, 12, 13, 14, 15, 16, 17]
    assert mann_whitney_p(a, b) == pytest.approx(0.0464007, abs=1e-6)  # scipy's exact p
