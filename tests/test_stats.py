"""qrsub.stats on synthetic samples whose answers are known."""
import math

import numpy as np
import pytest

from qrsub import stats


@pytest.mark.parametrize("n, ranks, coverage", [
    (10, (2, 9), 1 - 2 * 11 / 1024),       # P(B<=1) = 11/1024 for B ~ Bin(10, 1/2)
    (20, (6, 15), 1 - 2 * 21700 / 2 ** 20),  # P(B<=5) = 21700/2^20
    (6, (1, 6), 1 - 2 / 64),
])
def test_median_rank_interval_matches_binomial_tables(n, ranks, coverage):
    k, j, cov = stats.median_rank_interval(n)
    assert (k, j) == ranks
    assert cov == pytest.approx(coverage)
    assert cov >= 0.95


def test_too_few_samples_give_the_whole_range_with_its_true_coverage():
    k, j, cov = stats.median_rank_interval(5)
    assert (k, j) == (1, 5) and cov == pytest.approx(1 - 2 / 32) and cov < 0.95


def test_median_interval_on_known_samples():
    est = stats.median_interval([10, 1, 9, 2, 8, 3, 7, 4, 6, 5])   # 1..10 shuffled
    assert (est.value, est.lo, est.hi) == (5.5, 2.0, 9.0)
    assert est.rel_half_width == pytest.approx(3.5 / 5.5)


def test_paired_ratio_of_an_exact_speedup():
    a = np.linspace(1.0, 1.2, 50)
    r = stats.ratio(a, 0.9 * a)
    assert (r.value, r.lo, r.hi) == pytest.approx((0.9, 0.9, 0.9))
    assert stats.verdict(r) == stats.FASTER


def test_paired_ratio_cancels_common_drift():
    # both candidates drift by 30% over the run; B is 2% slower in every round
    drift = 1 + 0.3 * np.sin(np.linspace(0, 6, 200))
    a, b = drift * 1.00, drift * 1.02
    paired, unpaired = stats.ratio(a, b), stats.ratio(a, b, paired=False)
    assert paired.value == pytest.approx(1.02) and stats.verdict(paired) == stats.SLOWER
    assert unpaired.hi - unpaired.lo > 10 * (paired.hi - paired.lo)


def test_identical_candidates_are_within_noise():
    rng = np.random.default_rng(1)
    a = 1 + 0.01 * rng.standard_normal(100)
    b = 1 + 0.01 * rng.standard_normal(100)
    r = stats.ratio(a, b)
    assert r.lo < 1 < r.hi and stats.verdict(r) == stats.NOISE


def test_unpaired_ratio_is_deterministic_and_covers_the_truth():
    rng = np.random.default_rng(2)
    a = 100 * (1 + 0.02 * rng.standard_normal(300))
    b = 80 * (1 + 0.02 * rng.standard_normal(200))
    r1, r2 = stats.ratio(a, b, paired=False), stats.ratio(a, b, paired=False)
    assert r1 == r2
    assert r1.lo < 0.8 < r1.hi and r1.hi - r1.lo < 0.01


def test_geomean_ratio_of_exact_ratios():
    a = np.ones(20)
    assert stats.geomean_ratio([(a, 0.5 * a), (a, 2 * a)]).value == pytest.approx(1.0)
    g = stats.geomean_ratio([(a, 0.8 * a), (a, 0.9 * a), (a, 1.0 * a)])
    assert g.value == pytest.approx((0.8 * 0.9) ** (1 / 3))
    assert g.lo == pytest.approx(g.value) and g.hi == pytest.approx(g.value)


def test_geomean_ratio_interval_covers_the_truth_and_narrows_with_cases():
    rng = np.random.default_rng(3)
    truth = [0.95, 0.97, 0.99, 0.96]
    pairs = [(1 + 0.02 * rng.standard_normal(60), t * (1 + 0.02 * rng.standard_normal(60))) for t in truth]
    g = stats.geomean_ratio(pairs)
    assert g.lo < math.prod(truth) ** 0.25 < g.hi
    assert stats.verdict(g) == stats.FASTER
    one = stats.geomean_ratio(pairs[:1])
    assert (g.hi - g.lo) < (one.hi - one.lo)
    assert stats.geomean_ratio(pairs) == g   # fixed seed: same numbers every time


def test_verdict_threshold():
    r = stats.Estimate(0.99, 0.985, 0.995)
    assert stats.verdict(r) == stats.FASTER
    assert stats.verdict(r, threshold=0.02) == stats.NOISE
    assert stats.verdict(stats.Estimate(1.05, 1.03, 1.07)) == stats.SLOWER


def test_bootstrap_interval_is_deterministic():
    x = np.arange(1, 101, dtype=float)
    e1, e2 = stats.bootstrap_interval(x), stats.bootstrap_interval(x)
    assert e1 == e2 and e1.lo < 50.5 < e1.hi


def test_geomean():
    assert stats.geomean([1, 4, 16]) == pytest.approx(4.0)
