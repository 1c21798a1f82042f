"""The audit's maths against closed forms, hand-computed values and scipy's exact binomial CI."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from bench.privacy.audit_maths import (
    clopper_pearson_upper,
    epsilon_from_rates,
    epsilon_lower_bound,
    max_demonstrable_epsilon,
    trials_to_demonstrate,
)


def test_clopper_pearson_zero_successes_has_closed_form():
    # P[Bin(n, p) = 0] = (1 - p)^n = 1 - confidence  =>  p = 1 - (1 - confidence)^(1/n)
    for n in (1, 10, 1000):
        assert clopper_pearson_upper(0, n, 0.95) == pytest.approx(1 - 0.05 ** (1 / n), rel=1e-12)


def test_clopper_pearson_all_successes_is_one():
    assert clopper_pearson_upper(7, 7, 0.99) == 1.0


def test_clopper_pearson_matches_table_value():
    # one-sided 95% upper limit for 1 success in 10 trials (standard exact-binomial tables)
    assert clopper_pearson_upper(1, 10, 0.95) == pytest.approx(0.3942, abs=1e-4)


@pytest.mark.parametrize("k,n", [(0, 50), (3, 50), (25, 50), (49, 50), (120, 10000)])
def test_clopper_pearson_solves_the_binomial_tail(k, n):
    upper = float(clopper_pearson_upper(k, n, 0.975))
    assert stats.binom.cdf(k, n, upper) == pytest.approx(0.025, rel=1e-8)


@pytest.mark.parametrize("k,n", [(0, 40), (5, 40), (39, 40), (498, 10000)])
def test_clopper_pearson_matches_scipy_exact_interval(k, n):
    # the upper end of the two-sided exact interval at 1 - 2a is the one-sided bound at 1 - a
    high = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact").high
    assert clopper_pearson_upper(k, n, 0.975) == pytest.approx(high, rel=1e-9)


def test_clopper_pearson_is_vectorised_and_monotone():
    upper = clopper_pearson_upper(np.arange(11), 10, 0.95)
    assert upper.shape == (11,)
    assert np.all(np.diff(upper) > 0) and upper[-1] == 1.0


@pytest.mark.parametrize("k,n,c", [(-1, 10, 0.95), (11, 10, 0.95), (0, 0, 0.95), (1, 10, 1.0), (1, 10, 0.0)])
def test_clopper_pearson_rejects_bad_arguments(k, n, c):
    with pytest.raises(ValueError):
        clopper_pearson_upper(k, n, c)


def test_epsilon_from_rates_hand_values():
    # max(log(0.5 / 0.05), log(0.95 / 0.5)) = log 10
    assert epsilon_from_rates(0.05, 0.5) == pytest.approx(math.log(10))
    # the other side wins when the rates swap
    assert epsilon_from_rates(0.5, 0.05) == pytest.approx(math.log(10))
    # delta = 0.1: log((1 - 0.1 - 0.5) / 0.05) = log 8
    assert epsilon_from_rates(0.05, 0.5, delta=0.1) == pytest.approx(math.log(8))


def test_epsilon_from_rates_is_exact_for_randomised_response():
    # randomised response with flip probability 1/(1+e^eps) is exactly eps-DP
    for eps in (0.1, 1.0, 3.0):
        flip = 1 / (1 + math.exp(eps))
        assert epsilon_from_rates(flip, flip) == pytest.approx(eps, rel=1e-12)


def test_epsilon_from_rates_edge_cases():
    assert epsilon_from_rates(0.5, 0.5) == 0.0  # a coin shows nothing
    assert epsilon_from_rates(0.7, 0.7) == 0.0  # worse than a coin: both logs negative
    assert epsilon_from_rates(0.0, 0.5) == math.inf
    assert epsilon_from_rates(1.0, 0.0) == 0.0  # numerators not positive
    assert epsilon_from_rates(np.array([0.05, 0.5]), np.array([0.5, 0.5])).shape == (2,)


def test_epsilon_lower_bound_uses_half_alpha_on_each_rate():
    fpr = clopper_pearson_upper(458, 10000, 0.975)
    fnr = clopper_pearson_upper(8751, 10000, 0.975)
    expected = math.log((1 - fnr) / fpr)
    assert epsilon_lower_bound(458, 8751, 10000, 0.0, 0.95) == pytest.approx(expected, rel=1e-12)


def test_max_demonstrable_epsilon_hand_computed():
    # p = 1 - 0.025^(1/10000) = 3.68820e-4; log((1 - p) / p) = 7.90483
    assert max_demonstrable_epsilon(10000) == pytest.approx(7.90483, abs=1e-5)
    # 1000 trials at 0.99: p = 1 - 0.005^(1/1000) = 5.28431e-3; log((1-p)/p) = 5.23772
    assert max_demonstrable_epsilon(1000, confidence=0.99) == pytest.approx(5.23772, abs=1e-5)
    # delta shrinks it: log((1 - 0.01 - p) / p)
    p = 1 - 0.025 ** (1 / 10000)
    assert max_demonstrable_epsilon(10000, delta=0.01) == pytest.approx(math.log((0.99 - p) / p), rel=1e-12)


def test_trials_to_demonstrate_inverts_the_maximum():
    # eps = 1: p <= 1/(1+e) = 0.268941; n >= log(0.025)/log(1 - 0.268941) = 11.78 -> 12
    assert trials_to_demonstrate(1.0) == 12
    for eps in (0.5, 3.0, 7.9):
        n = int(trials_to_demonstrate(eps))
        assert max_demonstrable_epsilon(n) >= eps > max_demonstrable_epsilon(n - 1)
    assert trials_to_demonstrate(1e6) == math.inf
    with pytest.raises(ValueError):
        trials_to_demonstrate(0.0)


def test_bound_is_sound_at_its_confidence():
    # a test whose true rates are tight for eps = 1 (FPR = e^-1 TPR): the bound may exceed
    # the true eps in at most 5% of repetitions
    rng = np.random.default_rng(0)
    n, eps = 2000, 1.0
    tpr = 0.3
    fp = rng.binomial(n, math.exp(-eps) * tpr, size=20000)
    fn = rng.binomial(n, 1 - tpr, size=20000)
    bounds = epsilon_lower_bound(fp, fn, n, 0.0, 0.95)
    exceeded = float(np.mean(bounds > eps))
    assert 0.0 < exceeded <= 0.05
