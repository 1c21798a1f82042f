"""The protocol's statistics: intervals over seeds, paired comparisons, ranks with ties."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from leaderboard.stats import Comparison, competition_ranks, mean_estimate, paired_comparison


def t_interval(values):
    values = np.asarray(values, dtype=float)
    half = stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / math.sqrt(len(values))
    return values.mean() - half, values.mean() + half


@pytest.mark.parametrize("values", [[0.50, 0.55, 0.47], [0.1, 0.3, 0.2, 0.25, 0.22], [0.7, 0.7001, 0.69, 0.71]])
def test_the_interval_is_the_t_interval(values):
    estimate = mean_estimate(values)
    low, high = t_interval(values)
    assert estimate.mean == pytest.approx(np.mean(values))
    assert estimate.std == pytest.approx(np.std(values, ddof=1))
    assert estimate.seeds == len(values)
    assert (estimate.high - estimate.mean) == pytest.approx(high - np.mean(values), rel=0.05)
    assert (estimate.mean - estimate.low) == pytest.approx(np.mean(values) - low, rel=0.05)


def test_one_seed_has_no_interval_and_bad_input_is_refused():
    estimate = mean_estimate([0.4])
    assert estimate.mean == 0.4 and math.isnan(estimate.low) and math.isnan(estimate.std)
    with pytest.raises(ValueError):
        mean_estimate([])
    with pytest.raises(ValueError):
        mean_estimate([0.1, float("nan")])
    with pytest.raises(ValueError):
        paired_comparison([0.1, 0.2], [0.1])


def test_a_consistent_clear_difference_is_separated():
    first, second = [0.62, 0.58, 0.66], [0.41, 0.40, 0.47]
    comparison = paired_comparison(first, second)
    assert comparison.separated and comparison.low > 0
    assert comparison.difference == pytest.approx(np.mean(first) - np.mean(second))
    assert comparison.flipped().separated and comparison.flipped().high < 0


def test_the_issue_example_is_a_tie():
    # Rank 1 vs rank 2 in the issue: 0.129 ± 0.131 against 0.121 ± 0.120 over three seeds.
    first, second = [0.005, 0.270, 0.112], [0.120, 0.005, 0.238]
    assert np.mean(first) == pytest.approx(0.129, abs=1e-3) and np.mean(second) == pytest.approx(0.121, abs=1e-3)
    comparison = paired_comparison(first, second)
    assert not comparison.separated and comparison.low < 0 < comparison.high


def test_three_small_same_sign_differences_are_not_enough():
    # A percentile bootstrap over three seeds separates any three same-sign differences
    # (under no difference, one time in four); the t critical value does not.
    first, second = [0.400, 0.520, 0.455], [0.390, 0.500, 0.450]
    comparison = paired_comparison(first, second)
    assert comparison.difference > 0 and not comparison.separated


def test_fewer_than_three_common_seeds_never_separate():
    assert not Comparison(0.5, 0.4, 0.6, seeds=2).separated
    assert Comparison(0.5, 0.4, 0.6, seeds=3).separated
    assert not paired_comparison([0.9, 0.9], [0.1, 0.15]).separated
    empty = paired_comparison([], [])
    assert empty.seeds == 0 and not empty.separated


def test_decisions_are_deterministic():
    args = ([0.50, 0.47, 0.55], [0.45, 0.46, 0.50])
    assert paired_comparison(*args) == paired_comparison(*args)
    code = ("from leaderboard.stats import paired_comparison; "
            "c = paired_comparison([0.50, 0.47, 0.55], [0.45, 0.46, 0.50]); print(repr((c.low, c.high, c.pvalue)))")
    other_process = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                   env={**os.environ, "PYTHONHASHSEED": "123"})
    comparison = paired_comparison(*args)
    assert other_process.stdout.strip() == repr((comparison.low, comparison.high, comparison.pvalue))


def test_competition_ranks_count_the_entries_separated_above():
    means = [0.9, 0.8, 0.7, 0.6]
    separated_pairs = {frozenset(p) for p in [(0, 1), (0, 2), (0, 3), (1, 3)]}
    ranks = competition_ranks(means, lambda i, j: frozenset((i, j)) in separated_pairs)
    assert ranks == [1, 2, 2, 3]
    assert competition_ranks(means, lambda i, j: False) == [1, 1, 1, 1]
    assert competition_ranks(means, lambda i, j: True) == [1, 2, 3, 4]
    assert competition_ranks([0.5, 0.5], lambda i, j: True) == [1, 1]
