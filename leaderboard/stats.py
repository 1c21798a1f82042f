"""The statistics of the leaderboard protocol (docs/protocol.md), as pure functions.

An entry's score is the mean over seeds of its per-seed hypervolume. Its uncertainty, and
the comparison of two entries, come from a two-level bootstrap:

1. seeds are resampled with replacement (the seed-to-seed variation: training, episodes,
   probes, mechanism noise);
2. within each drawn seed, the hypervolume is redrawn under the cells' logged evaluation
   noise (see :func:`hypervolume_noise`), which puts a floor under the spread that three
   seeds alone cannot estimate.

The bootstrap gives a standard error (with the small-sample factor n / (n - 1) on its
variance); the interval is mean ± t(n-1) × SE. Without any logged noise this is exactly the
paired t-test over seeds; a plain percentile interval over three seeds would separate two
equal entries whenever their three differences share a sign (one time in four). The
evaluation noise of a cell is its utility's and its privacy score's standard error within
the run; an interval of a quantity with a bounded range (a hypervolume) is cut to that range.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from leaderboard.pareto import hypervolume_2d_batch

__all__ = [
    "Comparison",
    "Estimate",
    "LEVEL",
    "MIN_SEEDS",
    "REPLICATES",
    "competition_ranks",
    "hypervolume_noise",
    "mean_estimate",
    "mean_interval",
    "paired_comparison",
    "score_noise",
    "stable_seed",
]

MIN_SEEDS = 3
"""Seeds an entry needs to be ranked, and common seeds two entries need to be separated."""

LEVEL = 0.95
"""Confidence level of intervals and separations."""

REPLICATES = 4000
"""Bootstrap replicates (seeded: the same inputs give the same decision)."""

NOISE_DRAWS = 512
"""Redraws of a seed's hypervolume under its cells' evaluation noise."""


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


@dataclass(frozen=True)
class Comparison:
    """A paired comparison of two entries over their common seeds (first minus second).

    Attributes:
        difference: Mean over common seeds of the per-seed difference.
        low: Lower end of its interval.
        high: Upper end of its interval.
        seeds: Number of common seeds.
    """

    difference: float
    low: float
    high: float
    seeds: int

    @property
    def separated(self) -> bool:
        """Whether the interval excludes 0 over at least :data:`MIN_SEEDS` common seeds."""
        return self.seeds >= MIN_SEEDS and (self.low > 0.0 or self.high < 0.0)

    def flipped(self) -> "Comparison":
        """Returns the same comparison read the other way round (second minus first)."""
        return Comparison(-self.difference, -self.high, -self.low, self.seeds)


def stable_seed(*parts: object) -> int:
    """Returns a 64-bit seed from strings (the same parts give the same seed in every process)."""
    text = "\x1f".join(str(p) for p in parts)
    return int.from_bytes(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()[:8], "little")


def hypervolume_noise(
    points: np.ndarray, errors: np.ndarray, rng: np.random.Generator, draws: int = NOISE_DRAWS
) -> np.ndarray | None:
    """Returns zero-mean deviations of one seed's hypervolume under its cells' evaluation noise.

    Each point is redrawn as independent normals around its coordinates with the given
    standard errors, clipped to [0, 1]; the deviations are the redrawn hypervolumes minus
    their own mean, so that the noise widens an interval without moving it (redrawing
    points pushes a frontier outwards on average).

    Args:
        points: (k, 2) utility and privacy of the seed's frontier candidates, in [0, 1].
        errors: (k, 2) standard errors of those coordinates (0: exact).
        rng: Random generator.
        draws: Number of redraws.

    Returns:
        Array (draws,) of deviations, or None when every error is 0 (nothing to redraw).
    """
    points = np.asarray(points, dtype=float).reshape(-1, 2)
    errors = np.nan_to_num(np.asarray(errors, dtype=float).reshape(-1, 2), nan=0.0)
    if len(points) == 0 or not np.any(errors > 0):
        return None
    redrawn = rng.normal(points, np.maximum(errors, 0.0), size=(draws, *points.shape))
    volumes = hypervolume_2d_batch(np.clip(redrawn, 0.0, 1.0))
    return volumes - volumes.mean()


def _bootstrap_se(values: np.ndarray, noise: Sequence[np.ndarray | None] | None, rng: np.random.Generator,
                  replicates: int) -> float:
    n = len(values)
    picks = rng.integers(0, n, size=(replicates, n))
    means = values[picks].mean(axis=1)
    if noise is not None and any(d is not None for d in noise):
        draws = max(len(d) for d in noise if d is not None)
        table = np.zeros((n, draws))
        for i, deviations in enumerate(noise):
            if deviations is not None:
                table[i] = np.resize(deviations, draws)
        columns = rng.integers(0, draws, size=(replicates, n))
        means = means + table[picks, columns].mean(axis=1)
    return float(np.std(means, ddof=1) * math.sqrt(n / (n - 1)))


def _interval(values: np.ndarray, noise, seed: int, level: float, replicates: int) -> tuple[float, float, float]:
    from scipy.stats import t as student_t

    mean = float(values.mean())
    n = len(values)
    if n < 2:
        return mean, math.nan, math.nan
    se = _bootstrap_se(values, noise, np.random.default_rng(seed), replicates)
    half = float(student_t.ppf(0.5 + level / 2.0, n - 1)) * se
    return mean, mean - half, mean + half


def mean_estimate(
    values: Sequence[float], noise: Sequence[np.ndarray | None] | None = None, *, seed: int = 0,
    level: float = LEVEL, replicates: int = REPLICATES, bounds: tuple[float, float] | None = None,
) -> Estimate:
    """Estimates the mean over seeds of a per-seed value (an entry's hypervolume).

    Args:
        values: One value per seed.
        noise: Per seed, zero-mean deviations of its value under evaluation noise (from
            :func:`hypervolume_noise`), or None.
        seed: Seed of the bootstrap.
        level: Confidence level.
        replicates: Bootstrap replicates.
        bounds: The range the mean can take (a hypervolume of unit-square points: (0, 1)).
            The interval is intersected with it and ``clipped`` says so: an interval that
            covers a mean inside the range still covers it after the cut, so coverage is
            kept, whereas a percentile interval over three seeds would lose it (see the
            module docstring).

    Returns:
        The mean, its interval (two-level bootstrap SE, Student t with n - 1 degrees of
        freedom) and the seed spread.

    Raises:
        ValueError: No values, or a value that is not finite.
    """
    arr = np.asarray(values, dtype=float)
    if arr.size == 0 or not np.all(np.isfinite(arr)):
        raise ValueError(f"need finite per-seed values, got {list(values)!r}")
    mean, low, high = _interval(arr, noise, seed, level, replicates)
    std = float(arr.std(ddof=1)) if arr.size > 1 else math.nan
    clipped = False
    if bounds is not None and math.isfinite(low):
        clipped = low < bounds[0] or high > bounds[1]
        low, high = max(low, bounds[0]), min(high, bounds[1])
    return Estimate(mean, low, high, std, int(arr.size), clipped)


def score_noise(se: float, rng: np.random.Generator, draws: int = NOISE_DRAWS) -> np.ndarray | None:
    """Returns zero-mean deviations of one seed's score under its within-run standard error.

    The scalar counterpart of :func:`hypervolume_noise`, for :func:`mean_estimate`'s ``noise``.

    Args:
        se: The score's standard error within the run (NaN or 0: none known).
        rng: Random generator.
        draws: Number of redraws.

    Returns:
        Array (draws,) of deviations, or None without a positive finite ``se``.
    """
    if not (math.isfinite(se) and se > 0):
        return None
    deviations = rng.normal(0.0, se, size=draws)
    return deviations - deviations.mean()


def mean_interval(values: Sequence[float], errors: Sequence[float], *, seed: int = 0,
                  level: float = LEVEL) -> tuple[float, float]:
    """Returns the mean over seeds of a score and the half-width of its interval, within-seed noise included.

    With two or more seeds it is :func:`mean_estimate`'s two-level bootstrap (seeds
    resampled, each seed's score redrawn under its ``errors``); with one seed, the seed's own
    interval (normal, ``errors[0]``), NaN when it records none.

    Args:
        values: One score per seed.
        errors: Its standard error within each seed's run (NaN: unknown, counted as 0).
        seed: Seed of the bootstrap.
        level: Confidence level.

    Returns:
        ``(mean, half_width)``; ``(nan, nan)`` without values.
    """
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return math.nan, math.nan
    se = np.asarray(errors, dtype=float).reshape(-1)
    if arr.size == 1:
        from scipy.stats import norm

        half = float(norm.ppf(0.5 + level / 2.0) * se[0]) if math.isfinite(se[0]) else math.nan
        return float(arr[0]), half
    rng = np.random.default_rng(seed)
    estimate = mean_estimate(arr, [score_noise(float(e), rng) for e in se], seed=seed, level=level)
    return estimate.mean, (estimate.high - estimate.low) / 2.0


def paired_comparison(
    first: Sequence[float], second: Sequence[float],
    first_noise: Sequence[np.ndarray | None] | None = None, second_noise: Sequence[np.ndarray | None] | None = None,
    *, seed: int = 0, level: float = LEVEL, replicates: int = REPLICATES,
) -> Comparison:
    """Compares two entries seed by seed: first minus second, over their common seeds.

    Args:
        first: The first entry's value per common seed.
        second: The second entry's value per the same seeds, in the same order.
        first_noise: Per seed, zero-mean deviations of the first value (or None).
        second_noise: The same for the second.
        seed: Seed of the bootstrap.
        level: Confidence level.
        replicates: Bootstrap replicates.

    Returns:
        The mean difference and its interval; ``separated`` when it excludes 0.

    Raises:
        ValueError: The two sequences differ in length or hold non-finite values.
    """
    a, b = np.asarray(first, dtype=float), np.asarray(second, dtype=float)
    if a.shape != b.shape or not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError("paired values must be finite and of one length")
    if a.size == 0:
        return Comparison(math.nan, math.nan, math.nan, 0)
    noise = None
    if first_noise is not None or second_noise is not None:
        noise = [_difference(x, y) for x, y in zip(first_noise or [None] * a.size, second_noise or [None] * a.size)]
    difference, low, high = _interval(a - b, noise, seed, level, replicates)
    return Comparison(difference, low, high, int(a.size))


def _difference(x: np.ndarray | None, y: np.ndarray | None) -> np.ndarray | None:
    if x is None and y is None:
        return None
    if x is None:
        return -np.asarray(y)
    if y is None:
        return np.asarray(x)
    size = max(len(x), len(y))
    return np.resize(x, size) - np.resize(y, size)


def competition_ranks(means: Sequence[float], separated: Callable[[int, int], bool]) -> list[int]:
    """Ranks entries: 1 + the number of entries with a higher mean that are separated from it.

    Entries that no better entry is separated from share the top rank; two entries share
    a rank when the same number of better entries is separated from each (a tie).

    Args:
        means: Each entry's mean.
        separated: ``separated(i, j)`` tells whether entries i and j are separated
            (symmetric).

    Returns:
        Ranks, in the order of ``means``.
    """
    ranks = []
    for i, mean in enumerate(means):
        better = sum(1 for j, other in enumerate(means) if j != i and other > mean and separated(j, i))
        ranks.append(1 + better)
    return ranks
