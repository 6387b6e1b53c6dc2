"""Statistics for comparing timings: medians, 95% intervals, ratios, verdicts.

Timings on a GPU are skewed (a clock dip or a context switch makes one sample
slow, nothing makes one fast), so every summary here is a median and every
interval is either distribution-free (order statistics of the median) or a
bootstrap with a fixed seed. Everything is deterministic: the same samples
give the same numbers on every machine.

Ratios are candidate / reference, so below 1 means the candidate is faster.
When both lists come from the same interleaved rounds (bench's ABBA loop),
`ratio` pairs them round by round: both samples of a round saw the same GPU
clock, so drift cancels in their quotient.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

LEVEL = 0.95
SEED = 20240611          # any fixed value: it only has to be the same every run
N_BOOT = 2000

FASTER = "faster"
SLOWER = "slower"
NOISE = "within noise"
# Verdicts on repeated single measurements (`qrsub sweep --remote`: one mean per case per submission).
INDISTINGUISHABLE = "not distinguishable"   # the win or loss is smaller than the spread of the repeats
UNMEASURED = "spread not measured"          # one submission on a side: no spread to compare with


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its interval; `level` is the interval's actual coverage."""

    value: float
    lo: float
    hi: float
    level: float = LEVEL

    @property
    def rel_half_width(self) -> float:
        """The larger side of the interval as a fraction of the value."""
        if self.value == 0:
            return math.inf
        return max(self.value - self.lo, self.hi - self.value) / abs(self.value)

    def to_dict(self) -> dict:
        return asdict(self)


def median(xs: Sequence[float]) -> float:
    if len(xs) == 0:
        raise ValueError("median of no samples")
    return float(np.median(np.asarray(xs, dtype=np.float64)))


def _binom_cdf(k: int, n: int) -> float:
    """P(Binomial(n, 1/2) <= k), exactly."""
    return sum(math.comb(n, i) for i in range(k + 1)) / 2.0 ** n


def median_rank_interval(n: int, level: float = LEVEL) -> tuple[int, int, float]:
    """1-based ranks (k, n-k+1) of the order-statistic interval for the median.

    The interval [x_(k), x_(n-k+1)] covers the true median with probability
    1 - 2 P(B <= k-1), B ~ Binomial(n, 1/2), whatever the distribution. We take
    the largest k whose coverage is still >= level. Below 6 samples no k
    reaches 95%; then the whole range is returned with its (lower) coverage.
    """
    if n < 1:
        raise ValueError("an interval needs at least one sample")
    alpha = 1.0 - level
    k = 0
    while k + 1 <= (n + 1) // 2 and 2 * _binom_cdf(k, n) <= alpha:
        k += 1
    k = max(k, 1)
    coverage = 1.0 - 2 * _binom_cdf(k - 1, n) if k <= n - k + 1 else 0.0
    return k, n - k + 1, coverage


def median_interval(xs: Sequence[float], level: float = LEVEL) -> Estimate:
    """Median with its distribution-free order-statistic interval."""
    s = np.sort(np.asarray(xs, dtype=np.float64))
    k, j, coverage = median_rank_interval(len(s), level)
    return Estimate(float(np.median(s)), float(s[k - 1]), float(s[j - 1]), coverage)


def bootstrap_interval(xs: Sequence[float], stat=np.median, level: float = LEVEL,
                       n_boot: int = N_BOOT, seed: int = SEED) -> Estimate:
    """`stat` of the samples with a percentile-bootstrap interval (fixed seed)."""
    x = np.asarray(xs, dtype=np.float64)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(x), size=(n_boot, len(x)))
    boots = np.apply_along_axis(stat, 1, x[idx])
    lo, hi = np.quantile(boots, [(1 - level) / 2, (1 + level) / 2])
    return Estimate(float(stat(x)), float(lo), float(hi), level)


def ratio(ref: Sequence[float], cand: Sequence[float], paired: bool = True,
          level: float = LEVEL, seed: int = SEED) -> Estimate:
    """cand / ref with an interval.

    Paired (the default, when both have one sample per round): the median of
    the per-round quotients with its order-statistic interval. Unpaired: the
    ratio of medians with a bootstrap interval, each side resampled on its own.
    """
    a = np.asarray(ref, dtype=np.float64)
    b = np.asarray(cand, dtype=np.float64)
    if paired and len(a) == len(b):
        return median_interval(b / a, level)
    rng = np.random.default_rng(seed)
    ma = np.median(a[rng.integers(0, len(a), size=(N_BOOT, len(a)))], axis=1)
    mb = np.median(b[rng.integers(0, len(b), size=(N_BOOT, len(b)))], axis=1)
    lo, hi = np.quantile(mb / ma, [(1 - level) / 2, (1 + level) / 2])
    return Estimate(float(np.median(b) / np.median(a)), float(lo), float(hi), level)


def _case_ratio_boots(a: np.ndarray, b: np.ndarray, paired: bool,
                      rng: np.random.Generator, n_boot: int) -> np.ndarray:
    """Bootstrap replicates of one case's median ratio (log scale)."""
    if paired and len(a) == len(b):
        q = np.log(b / a)
        return np.median(q[rng.integers(0, len(q), size=(n_boot, len(q)))], axis=1)
    ma = np.median(a[rng.integers(0, len(a), size=(n_boot, len(a)))], axis=1)
    mb = np.median(b[rng.integers(0, len(b), size=(n_boot, len(b)))], axis=1)
    return np.log(mb / ma)


def _case_ratio_point(a: np.ndarray, b: np.ndarray, paired: bool) -> float:
    if paired and len(a) == len(b):
        return float(np.median(np.log(b / a)))
    return float(np.log(np.median(b) / np.median(a)))


def geomean_ratio(pairs: Sequence[tuple[Sequence[float], Sequence[float]]],
                  paired: bool = True, level: float = LEVEL,
                  n_boot: int = N_BOOT, seed: int = SEED) -> Estimate:
    """Geometric mean over cases of each case's ratio cand/ref, with an interval.

    This is the leaderboard's score ratio: the score is the geometric mean of
    per-case times, so score(cand)/score(ref) = geomean of per-case ratios.
    The interval resamples every case independently (fixed seed) and takes the
    percentiles of the resulting geomeans.
    """
    if not pairs:
        raise ValueError("a geometric mean needs at least one case")
    rng = np.random.default_rng(seed)
    logs = np.zeros(n_boot)
    point = 0.0
    for ref, cand in pairs:
        a = np.asarray(ref, dtype=np.float64)
        b = np.asarray(cand, dtype=np.float64)
        logs += _case_ratio_boots(a, b, paired, rng, n_boot)
        point += _case_ratio_point(a, b, paired)
    logs /= len(pairs)
    lo, hi = np.quantile(logs, [(1 - level) / 2, (1 + level) / 2])
    return Estimate(math.exp(point / len(pairs)), math.exp(lo), math.exp(hi), level)


def geomean(xs: Sequence[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def verdict(r: Estimate, threshold: float = 0.0) -> str:
    """Is a ratio cand/ref a real difference?

    Real when the whole interval lies beyond 1 (and beyond 1 -/+ threshold,
    for those who only care about differences of some size).
    """
    if r.hi < 1.0 - threshold:
        return FASTER
    if r.lo > 1.0 + threshold:
        return SLOWER
    return NOISE


def range_ratio(ref: Sequence[float], cand: Sequence[float]) -> Estimate:
    """cand / ref for a few repeated measurements of each (one mean per submission).

    The value is the ratio of the medians; the interval is the whole range the
    repeats allow, min(cand) / max(ref) to max(cand) / min(ref), so a ratio
    whose interval excludes 1 beats every repeat of the other side. It is a
    range, not a confidence interval: `level` is 0.0 (no coverage claimed).
    """
    a = np.asarray(ref, dtype=np.float64)
    b = np.asarray(cand, dtype=np.float64)
    if not len(a) or not len(b):
        raise ValueError("a ratio needs at least one measurement on each side")
    return Estimate(float(np.median(b) / np.median(a)), float(b.min() / a.max()), float(b.max() / a.min()), 0.0)


def range_verdict(r: Estimate, n_ref: int, n_cand: int) -> str:
    """A range_ratio's verdict: faster or slower only when every repeat says so,
    "not distinguishable" when the difference is within the spread, and "spread
    not measured" when a side was measured once."""
    if min(n_ref, n_cand) < 2:
        return UNMEASURED
    if r.hi < 1.0:
        return FASTER
    if r.lo > 1.0:
        return SLOWER
    return INDISTINGUISHABLE
