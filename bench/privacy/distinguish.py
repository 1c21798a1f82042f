"""The distinguishing test of an audit: a scalar statistic per output and a threshold.

Both are chosen on selection trials that never enter the bound, so the counted trials
are independent of every choice and their error counts are honest binomial draws.

The statistics are fitted per observed coordinate (one output value, e.g. one channel of
one released pixel): a Laplace location for each input (the median of its selection
outputs) and a scale (the mean absolute deviation from those medians, over both
inputs); ``a_k`` and ``b_k`` are the locations under the first and second input.

- ``laplace_llr``: the log-likelihood ratio of those Laplace fits,
  ``sum_k (|y_k - a_k| - |y_k - b_k|) / scale_k``; each term is
  ``clamp(2 y_k - a_k - b_k, -|b_k - a_k|, |b_k - a_k|)`` up to sign and scale, the
  Neyman-Pearson statistic for Laplace noise (every claimed built-in adds Laplace noise).
- ``linear``: ``sum_k sign(b_k - a_k) (y_k - (a_k + b_k) / 2) / scale_k``, the
  Neyman-Pearson statistic for Gaussian noise.

Coordinates whose fitted locations agree carry no weight; a coordinate that repeats
another on every selection trial (a pixelated cell) is read once, weighted by its count.
Both statistics are also fitted on the coordinates whose locations differ by more than
``FOCUS_Z`` standard errors alone (``... (focused)``): over a whole release most
coordinates do not depend on the input, and their fitted differences are noise. The test
says "second input" when the statistic is at or above (or, reversed, at or below) a
threshold; the threshold, direction and statistic are those whose Clopper-Pearson epsilon
bound on the selection trials is largest.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch

from bench.privacy.audit_maths import clopper_pearson_upper, epsilon_from_rates

_MIN_SCALE = 1e-9
"""Scale floor: a coordinate without noise whose locations differ decides the test alone."""

FOCUS_Z = 3.0
"""A coordinate enters the focused statistics when its two fitted locations differ by more
than this many standard errors (a Laplace median's is about scale / sqrt(n))."""


@dataclass(frozen=True)
class Statistic:
    """A scalar statistic of one output, fitted on selection trials.

    Attributes:
        name: ``laplace_llr`` or ``linear``.
        columns: The observed coordinates it reads, int64 [j].
        first: Fitted location of each of those coordinates under the first input, float64 [j].
        second: Fitted location under the second input, float64 [j].
        weight: Multiplicity / fitted noise scale of each, float64 [j].
    """

    name: str
    columns: torch.Tensor
    first: torch.Tensor
    second: torch.Tensor
    weight: torch.Tensor

    def __call__(self, observed: torch.Tensor) -> torch.Tensor:
        """Returns the statistic of every trial: float64 [n] from observations [n, k]."""
        y = observed.index_select(1, self.columns.to(observed.device)).to(torch.float64)
        first, second, weight = (t.to(y.device) for t in (self.first, self.second, self.weight))
        if self.name == "laplace_llr":
            terms = (y - first).abs_().sub_((y - second).abs_())
        else:
            terms = (y - (first + second) / 2).mul_(torch.sign(second - first))
        return terms.mul_(weight).sum(1)


def _distinct_columns(observed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns one index per distinct column of ``observed`` [n, k] and how many columns equal it.

    A pixelating mechanism releases the same value at every pixel of a cell; reading
    one of them with the multiplicity as weight gives the same statistic, faster.
    """
    _, inverse, counts = torch.unique(observed, dim=1, return_inverse=True, return_counts=True)
    first = torch.full((counts.numel(),), observed.shape[1], dtype=torch.int64, device=observed.device)
    first.scatter_reduce_(0, inverse, torch.arange(observed.shape[1], device=observed.device), "amin")
    return first, counts


def _fit(first: torch.Tensor, second: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Returns (columns, locations under each input, spread, multiplicity) of the informative distinct columns."""
    columns, counts = _distinct_columns(torch.cat([first, second]))
    a = first.index_select(1, columns).to(torch.float64)
    b = second.index_select(1, columns).to(torch.float64)
    loc_a = a.median(0).values
    loc_b = b.median(0).values
    spread = torch.cat([(a - loc_a).abs(), (b - loc_b).abs()]).mean(0).clamp_min(_MIN_SCALE)
    keep = loc_a != loc_b
    return tuple(t[keep].cpu() for t in (columns, loc_a, loc_b, spread, counts.to(torch.float64)))


def fit_statistics(first: torch.Tensor, second: torch.Tensor) -> list[Statistic]:
    """Fits the candidate statistics on selection observations of the two inputs.

    Columns that repeat another column on every selection trial are read once (with
    their multiplicity as weight), and columns whose fitted locations agree are dropped:
    neither changes what the statistic can tell apart on the selection trials, and any
    statistic fixed before the counted trials keeps the bound valid.

    Args:
        first: Observations [n, k] of the first input.
        second: Observations [n, k] of the second input.

    Returns:
        The ``laplace_llr`` and ``linear`` statistics.
    """
    columns, loc_a, loc_b, spread, counts = _fit(first, second)
    return [Statistic(name, columns, loc_a, loc_b, counts / spread) for name in ("laplace_llr", "linear")]


def candidate_statistics(first: torch.Tensor, second: torch.Tensor) -> list[Statistic]:
    """Returns :func:`fit_statistics` and, where they differ, the same restricted to clearly moved coordinates.

    A coordinate is clearly moved when its locations differ by more than ``FOCUS_Z``
    standard errors (``spread * sqrt(2 / n)``; a coordinate without spread always is).

    Args:
        first: Observations [n, k] of the first input.
        second: Observations [n, k] of the second input.
    """
    columns, loc_a, loc_b, spread, counts = _fit(first, second)
    full = [Statistic(name, columns, loc_a, loc_b, counts / spread) for name in ("laplace_llr", "linear")]
    moved = (loc_b - loc_a).abs() / spread > FOCUS_Z * (2.0 / first.shape[0]) ** 0.5
    if bool(moved.all()) or not bool(moved.any()):
        return full
    return full + [Statistic(f"{s.name} (focused)", s.columns[moved], s.first[moved], s.second[moved],
                             s.weight[moved]) for s in full]


def scan_separations(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """Returns, for many pairs at once, how far apart their ``laplace_llr`` statistic puts the two inputs.

    For every pair p the statistic is fitted as :func:`fit_statistics` does on
    ``first[p]`` and ``second[p]`` (a column repeated k times counts as one of weight k)
    and evaluated on the same observations; the separation is
    ``|mean_second - mean_first| / sqrt((var_first + var_second) / 2)``: infinite when
    the values differ and neither set varies (an un-noised output), 0 when they agree.

    Args:
        first: Observations [P, n, k] of the first input of each of P pairs.
        second: Observations [P, n, k] of the second input.

    Returns:
        float64 [P].
    """
    a, b = first.to(torch.float64), second.to(torch.float64)
    loc_a, loc_b = a.median(1, keepdim=True).values, b.median(1, keepdim=True).values
    spread = torch.cat([(a - loc_a).abs(), (b - loc_b).abs()], 1).mean(1, keepdim=True).clamp_min(_MIN_SCALE)
    weight = (loc_a != loc_b) / spread
    values_a = ((a - loc_a).abs() - (a - loc_b).abs()).mul_(weight).sum(2)
    values_b = ((b - loc_a).abs() - (b - loc_b).abs()).mul_(weight).sum(2)
    gap = (values_b.mean(1) - values_a.mean(1)).abs()
    pooled = ((values_a.var(1, unbiased=False) + values_b.var(1, unbiased=False)) / 2).sqrt()
    still = pooled == 0
    out = gap / torch.where(still, torch.ones_like(pooled), pooled)
    return torch.where(still, torch.where(gap > 0, torch.full_like(gap, math.inf), torch.zeros_like(gap)), out)


@dataclass(frozen=True)
class Rule:
    """A threshold test on a statistic.

    Attributes:
        statistic: The fitted statistic.
        threshold: The threshold t.
        upward: True: "second input" when the statistic is >= t; False: when <= t.
        selection_bound: The epsilon bound this rule reached on the selection trials.
    """

    statistic: Statistic
    threshold: float
    upward: bool
    selection_bound: float

    def says_second(self, observed: torch.Tensor) -> torch.Tensor:
        """Returns, per trial, whether the test names the second input: bool [n]."""
        values = self.statistic(observed)
        return values >= self.threshold if self.upward else values <= self.threshold

    def describe(self) -> str:
        """Returns the rule in words, e.g. ``laplace_llr >= 2.37``."""
        return f"{self.statistic.name} {'>=' if self.upward else '<='} {self.threshold:.4g}"


@functools.lru_cache(maxsize=64)
def _upper_bounds(n: int, confidence: float) -> np.ndarray:
    """Returns the Clopper-Pearson upper bound of every count 0..n at ``1 - (1 - confidence) / 2``."""
    upper = clopper_pearson_upper(np.arange(n + 1), n, 1.0 - (1.0 - confidence) / 2.0)
    upper.flags.writeable = False
    return upper


def best_threshold(
    first: np.ndarray, second: np.ndarray, delta: float, confidence: float
) -> tuple[float, bool, float]:
    """Returns the threshold and direction whose epsilon bound on these values is largest.

    Every observed value is a candidate threshold, in both directions; the bound of each
    comes from :func:`bench.privacy.audit_maths.epsilon_from_rates` on Clopper-Pearson upper
    bounds of its error counts (each at ``1 - (1 - confidence) / 2``).

    Args:
        first: Statistic values on the first input's selection trials [n].
        second: Statistic values on the second input's selection trials [n] (same n).
        delta: The claim's delta.
        confidence: Joint confidence of the bound.

    Returns:
        (threshold, upward, bound).
    """
    n = len(first)
    a, b = np.sort(first), np.sort(second)
    candidates = np.unique(np.concatenate([a, b]))
    upper = _upper_bounds(n, confidence)
    below_a_left = np.searchsorted(a, candidates, side="left")
    below_b_left = np.searchsorted(b, candidates, side="left")
    upto_a = np.searchsorted(a, candidates, side="right")
    upto_b = np.searchsorted(b, candidates, side="right")
    up = epsilon_from_rates(upper[n - below_a_left], upper[below_b_left], delta)
    down = epsilon_from_rates(upper[upto_a], upper[n - upto_b], delta)
    i_up, i_down = int(np.argmax(up)), int(np.argmax(down))
    if up[i_up] >= down[i_down]:
        return float(candidates[i_up]), True, float(up[i_up])
    return float(candidates[i_down]), False, float(down[i_down])


def _midway(threshold: float, upward: bool, first: np.ndarray, second: np.ndarray) -> float:
    """Returns the threshold moved halfway to the nearest selection value it excludes.

    The test makes the same calls on the selection trials, but a new value a little past
    the nearest one seen (a statistic dominated by an un-noised coordinate still varies a
    little with the noisy ones) is not called wrongly for that alone.
    """
    values = np.concatenate([first, second])
    beyond = values[values < threshold] if upward else values[values > threshold]
    if beyond.size == 0:
        return threshold
    nearest = beyond.max() if upward else beyond.min()
    return float((threshold + nearest) / 2.0)


def choose_rule(
    statistics: list[Statistic], first: torch.Tensor, second: torch.Tensor, delta: float, confidence: float
) -> Rule:
    """Returns the statistic, threshold and direction that best separate the selection trials.

    Args:
        statistics: Candidates from :func:`fit_statistics`.
        first: Selection observations [n, k] of the first input.
        second: Selection observations [n, k] of the second input.
        delta: The claim's delta.
        confidence: Joint confidence of the bound.
    """
    best: Rule | None = None
    for statistic in statistics:
        values_a = statistic(first).cpu().numpy()
        values_b = statistic(second).cpu().numpy()
        threshold, upward, bound = best_threshold(values_a, values_b, delta, confidence)
        if best is None or bound > best.selection_bound:
            best = Rule(statistic, _midway(threshold, upward, values_a, values_b), upward, bound)
    assert best is not None
    return best
