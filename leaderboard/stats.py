"""The statistics of the leaderboard protocol (docs/protocol.md), as pure functions.

An entry's score is the mean over seeds of its per-seed hypervolume, with a Student t
interval over seeds. Two entries are compared by the per-seed difference of their
hypervolumes on their common seeds: a paired t-test. A seed's cells of two entries share
the data, the episodes, the probes and the adversaries' training order, so the difference
cancels what a seed does to every entry alike; and the seed-to-seed variance of that
difference already contains each cell's within-seed evaluation noise (probes, episodes,
mechanism noise), so nothing is added to it. Every decision is exact (no Monte Carlo): the
same per-seed values give the same decision in every process.

Entries with fewer than :data:`MIN_SEEDS` common seeds but that many seeds each are
compared unpaired (Welch's t-test), which is valid but weaker: the board's own suites put
every entry on the same seeds.

What a board can detect is stated by :func:`minimum_detectable_difference`: the smallest
true difference of mean hypervolume that the paired test separates with 80% power, from the
noncentral t distribution and the board's own pooled standard deviation of per-seed
differences (:func:`pooled_difference_sd`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np
from scipy import optimize
from scipy import stats as scipy_stats

__all__ = [
    "Comparison",
    "DetectionPower",
    "Estimate",
    "LEVEL",
    "MIN_SEEDS",
    "POWER",
    "compare",
    "competition_ranks",
    "detection_power",
    "mean_estimate",
    "mean_interval",
    "minimum_detectable_difference",
    "paired_comparison",
    "paired_differences",
    "pooled_difference_sd",
    "power_of_paired_test",
    "unpaired_comparison",
]

MIN_SEEDS = 3
"""Seeds an entry needs to be ranked, and common seeds two entries need to be compared paired."""

LEVEL = 0.95
"""Confidence level of intervals and separations (a separation is a two-sided test at 1 - LEVEL)."""

POWER = 0.80
"""The power at which a board states the difference it can detect."""


@dataclass(frozen=True)
class Estimate:
    """The mean over seeds of a per-seed quantity, with its interval and spread.

    Attributes:
        mean: Mean over seeds.
        low: Lower end of the interval (NaN with fewer than two seeds).
        high: Upper end of the interval.
        std: Sample standard deviation over seeds (the seed spread; NaN for one seed).
        seeds: Number of seeds.
        clipped: Whether the interval was cut to the range the quantity can take (see
            :func:`mean_estimate`'s ``bounds``).
    """

    mean: float
    low: float
    high: float
    std: float
    seeds: int
    clipped: bool = False

    @property
    def se(self) -> float:
        """The standard error of the mean over seeds (NaN for one seed)."""
        return self.std / math.sqrt(self.seeds) if self.seeds > 1 else math.nan


@dataclass(frozen=True)
class Comparison:
    """A comparison of two entries (first minus second) by a t-test over seeds.

    Attributes:
        difference: Mean over common seeds of the per-seed difference (unpaired: the
            difference of the two means).
        low: Lower end of its interval at :data:`LEVEL`.
        high: Upper end of its interval.
        seeds: Number of common seeds (unpaired: the smaller of the two seed counts).
        pvalue: Two-sided p-value of "no difference" (NaN when no test was possible).
        paired: Whether the seeds were paired.
    """

    difference: float
    low: float
    high: float
    seeds: int
    pvalue: float = math.nan
    paired: bool = True

    @property
    def separated(self) -> bool:
        """Whether the interval excludes 0 over at least :data:`MIN_SEEDS` seeds (p < 1 - LEVEL)."""
        return self.seeds >= MIN_SEEDS and (self.low > 0.0 or self.high < 0.0)

    def flipped(self) -> "Comparison":
        """Returns the same comparison read the other way round (second minus first)."""
        return Comparison(-self.difference, -self.high, -self.low, self.seeds, self.pvalue, self.paired)


@dataclass(frozen=True)
class DetectionPower:
    """What a board's paired test can detect, from its own seeds' variance.

    Attributes:
        difference_sd: Pooled standard deviation of the per-seed hypervolume differences of
            its ranked entries' pairs (NaN: fewer than two pairs' worth of seeds).
        pairs: Pairs of entries pooled.
        seeds: Seeds of a comparison (the board's usual number of common seeds).
        detectable: Smallest true difference of mean hypervolume separated with
            :data:`POWER` (NaN when ``difference_sd`` is unknown; 0 when it is 0).
    """

    difference_sd: float
    pairs: int
    seeds: int
    detectable: float

    def text(self) -> str:
        """One line: ``detects a hypervolume difference of 0.052 at 80% power (3 seeds; ...)``."""
        if not math.isfinite(self.detectable):
            return "minimum detectable difference unknown (fewer than two ranked entries with common seeds)"
        return (f"minimum detectable hypervolume difference {self.detectable:.3f} at {POWER:.0%} power "
                f"(paired t over {self.seeds} seeds, two-sided 5%; sd of per-seed differences "
                f"{self.difference_sd:.3f}, pooled over {self.pairs} pair{'s' if self.pairs != 1 else ''})")


def _t_quantile(level: float, df: float) -> float:
    return float(scipy_stats.t.ppf(0.5 + level / 2.0, df))


def mean_estimate(values: Sequence[float], *, level: float = LEVEL,
                  bounds: tuple[float, float] | None = None) -> Estimate:
    """Estimates the mean over seeds of a per-seed value (an entry's hypervolume).

    Args:
        values: One value per seed.
        level: Confidence level.
        bounds: The range the mean can take (a hypervolume of unit-square points: (0, 1)).
            The interval is intersected with it and ``clipped`` says so: an interval that
            covers a mean inside the range still covers it after the cut.

    Returns:
        The mean, its Student t interval over seeds (n - 1 degrees of freedom) and the seed
        spread.

    Raises:
        ValueError: No values, or a value that is not finite.
    """
    arr = np.asarray(values, dtype=float)
    if arr.size == 0 or not np.all(np.isfinite(arr)):
        raise ValueError(f"need finite per-seed values, got {list(values)!r}")
    mean = float(arr.mean())
    if arr.size < 2:
        return Estimate(mean, math.nan, math.nan, math.nan, 1)
    std = float(arr.std(ddof=1))
    half = _t_quantile(level, arr.size - 1) * std / math.sqrt(arr.size)
    low, high = mean - half, mean + half
    clipped = False
    if bounds is not None:
        clipped = low < bounds[0] or high > bounds[1]
        low, high = max(low, bounds[0]), min(high, bounds[1])
    return Estimate(mean, low, high, std, int(arr.size), clipped)


def mean_interval(values: Sequence[float], errors: Sequence[float], *,
                  level: float = LEVEL) -> tuple[float, float]:
    """Returns the mean over seeds of a score and the half-width of its interval.

    With two or more seeds the Student t interval over seeds (the seed-to-seed spread
    already contains each seed's within-run noise, so ``errors`` are not added); with one
    seed, the seed's own normal interval from ``errors[0]`` (NaN when it records none).

    Args:
        values: One score per seed.
        errors: Its standard error within each seed's run (NaN: unknown).
        level: Confidence level.

    Returns:
        ``(mean, half_width)``; ``(nan, nan)`` without values.
    """
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return math.nan, math.nan
    if arr.size == 1:
        se = float(np.asarray(errors, dtype=float).reshape(-1)[0])
        half = float(scipy_stats.norm.ppf(0.5 + level / 2.0) * se) if math.isfinite(se) else math.nan
        return float(arr[0]), half
    estimate = mean_estimate(arr, level=level)
    return estimate.mean, estimate.high - estimate.mean


def paired_comparison(first: Sequence[float], second: Sequence[float], *, level: float = LEVEL) -> Comparison:
    """Compares two entries seed by seed (first minus second): the paired t-test over common seeds.

    Args:
        first: The first entry's value per common seed.
        second: The second entry's value per the same seeds, in the same order.
        level: Confidence level.

    Returns:
        The mean difference, its t interval and p-value; ``separated`` when the interval
        excludes 0. Differences equal on every seed have no spread: a nonzero one is
        separated (p = 0), a zero one is not (p = 1).

    Raises:
        ValueError: The two sequences differ in length or hold non-finite values.
    """
    a, b = np.asarray(first, dtype=float), np.asarray(second, dtype=float)
    if a.shape != b.shape or not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError("paired values must be finite and of one length")
    if a.size == 0:
        return Comparison(math.nan, math.nan, math.nan, 0)
    d = a - b
    mean = float(d.mean())
    if d.size < 2:
        return Comparison(mean, math.nan, math.nan, 1)
    se = float(d.std(ddof=1)) / math.sqrt(d.size)
    df = d.size - 1
    if se == 0.0:
        return Comparison(mean, mean, mean, int(d.size), 1.0 if mean == 0.0 else 0.0)
    half = _t_quantile(level, df) * se
    pvalue = float(2.0 * scipy_stats.t.sf(abs(mean) / se, df))
    return Comparison(mean, mean - half, mean + half, int(d.size), pvalue)


def unpaired_comparison(first: Sequence[float], second: Sequence[float], *, level: float = LEVEL) -> Comparison:
    """Compares two entries measured on different seeds: Welch's t-test (first minus second).

    Args:
        first: The first entry's per-seed values.
        second: The second entry's per-seed values (other seeds).
        level: Confidence level.

    Returns:
        The difference of means, its Welch interval and p-value, ``paired`` False and
        ``seeds`` the smaller seed count.

    Raises:
        ValueError: A non-finite value.
    """
    a, b = np.asarray(first, dtype=float), np.asarray(second, dtype=float)
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError("values must be finite")
    seeds = int(min(a.size, b.size))
    if seeds < 2:
        return Comparison(math.nan, math.nan, math.nan, seeds, paired=False)
    mean = float(a.mean() - b.mean())
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    se = math.sqrt(va + vb)
    if se == 0.0:
        return Comparison(mean, mean, mean, seeds, 1.0 if mean == 0.0 else 0.0, paired=False)
    df = (va + vb) ** 2 / (va ** 2 / (a.size - 1) + vb ** 2 / (b.size - 1))
    half = _t_quantile(level, df) * se
    pvalue = float(2.0 * scipy_stats.t.sf(abs(mean) / se, df))
    return Comparison(mean, mean - half, mean + half, seeds, pvalue, paired=False)


def compare(first: Mapping[int, float], second: Mapping[int, float], *, level: float = LEVEL) -> Comparison:
    """Compares two entries' per-seed values: paired over common seeds, else unpaired.

    Paired when they share at least :data:`MIN_SEEDS` seeds (the board's case); otherwise,
    when each has at least that many, Welch's t-test over their own seeds; otherwise an
    unseparated comparison over the common seeds.

    Args:
        first: Seed -> the first entry's value.
        second: Seed -> the second entry's value.
        level: Confidence level.
    """
    common = sorted(set(first) & set(second))
    if len(common) >= MIN_SEEDS or min(len(first), len(second)) < MIN_SEEDS:
        return paired_comparison([first[s] for s in common], [second[s] for s in common], level=level)
    return unpaired_comparison(list(first.values()), list(second.values()), level=level)


def competition_ranks(means: Sequence[float], separated: Callable[[int, int], bool]) -> list[int]:
    """Ranks entries so that a rank never improves as the mean falls.

    An entry's rank is 1 + the number of entries separated above it, or above any entry
    with a mean at least its own, whichever is more: ``1 + max over k with mean_k >= mean_i
    of #{j: mean_j > mean_k and separated(j, k)}``. Entries that no better entry is
    separated from share the top rank. Without the maximum, an entry could rank above
    another with a higher mean only because the noisier of the two is separated from fewer.

    Args:
        means: Each entry's mean.
        separated: ``separated(i, j)`` tells whether entries i and j are separated
            (symmetric).

    Returns:
        Ranks, in the order of ``means``.
    """
    above = [sum(1 for j, other in enumerate(means) if j != i and other > mean and separated(j, i))
             for i, mean in enumerate(means)]
    return [1 + max(above[k] for k, other in enumerate(means) if other >= mean) for mean in means]


def paired_differences(values: Mapping[str, Mapping[int, float]]) -> list[np.ndarray]:
    """Returns, for every pair of entries with at least two common seeds, its per-seed differences.

    Args:
        values: Entry -> (seed -> value).
    """
    names = sorted(values)
    out = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            common = sorted(set(values[a]) & set(values[b]))
            if len(common) >= 2:
                out.append(np.array([values[a][s] - values[b][s] for s in common]))
    return out


def pooled_difference_sd(values: Mapping[str, Mapping[int, float]]) -> tuple[float, int, int]:
    """Returns the pooled standard deviation of per-seed differences over every pair of entries.

    Each pair with at least two common seeds contributes its differences' squared deviations
    from their mean and its n - 1 degrees of freedom.

    Args:
        values: Entry -> (seed -> value).

    Returns:
        ``(sd, pairs, seeds)``: the pooled sd (NaN without a pair), the number of pairs
        pooled, and the median number of common seeds over those pairs (0 without one).
    """
    pairs = paired_differences(values)
    dof = sum(len(d) - 1 for d in pairs)
    if not dof:
        return math.nan, 0, 0
    squares = sum(float(((d - d.mean()) ** 2).sum()) for d in pairs)
    return math.sqrt(squares / dof), len(pairs), int(np.median([len(d) for d in pairs]))


def power_of_paired_test(difference: float, sd: float, seeds: int, *, level: float = LEVEL) -> float:
    """Returns the probability that the paired t-test separates a true mean difference.

    Exact under normal per-seed differences: the noncentral t distribution with n - 1
    degrees of freedom and noncentrality ``difference * sqrt(n) / sd``.

    Args:
        difference: True difference of mean hypervolume.
        sd: Standard deviation of a per-seed difference.
        seeds: Common seeds (at least 2).
        level: Confidence level of the test.
    """
    if seeds < max(2, MIN_SEEDS):
        return 0.0
    if sd <= 0.0:
        return 1.0 if difference != 0.0 else 0.0
    df = seeds - 1
    critical = _t_quantile(level, df)
    ncp = abs(difference) * math.sqrt(seeds) / sd
    return float(scipy_stats.nct.sf(critical, df, ncp) + scipy_stats.nct.cdf(-critical, df, ncp))


def minimum_detectable_difference(sd: float, seeds: int, *, power: float = POWER, level: float = LEVEL) -> float:
    """Returns the smallest true difference the paired t-test separates with the given power.

    Args:
        sd: Standard deviation of a per-seed difference.
        seeds: Common seeds.
        power: Required power.
        level: Confidence level of the test.

    Returns:
        The difference (in the unit of ``sd``); NaN for an unknown sd or fewer than
        :data:`MIN_SEEDS` seeds; 0 for sd 0.
    """
    if not math.isfinite(sd) or seeds < MIN_SEEDS:
        return math.nan
    if sd == 0.0:
        return 0.0
    upper = sd
    while power_of_paired_test(upper, sd, seeds, level=level) < power:
        upper *= 2.0
    return float(optimize.brentq(lambda x: power_of_paired_test(x, sd, seeds, level=level) - power,
                                 0.0, upper, xtol=1e-10))


def detection_power(values: Mapping[str, Mapping[int, float]], *, power: float = POWER,
                    level: float = LEVEL) -> DetectionPower:
    """Returns what a board's paired test can detect from its ranked entries' per-seed values.

    Args:
        values: Entry -> (seed -> hypervolume).
        power: Required power.
        level: Confidence level of the test.
    """
    sd, pairs, seeds = pooled_difference_sd(values)
    return DetectionPower(sd, pairs, seeds, minimum_detectable_difference(sd, seeds, power=power, level=level))
