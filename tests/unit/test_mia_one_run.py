"""The one-run canary audit's maths (Steinke, Nasr & Jagielski 2023) against brute force and closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench.privacy.mia.one_run import (
    count_correct,
    epsilon_ceiling,
    epsilon_lower_bound,
    guess_counts,
    one_run_audit,
    tail_bound,
)


def _tail(r: int, q: float, v: int) -> float:
    """P[Binomial(r, q) >= v] by summing the binomial terms (Python integers and floats)."""
    if v <= 0:
        return 1.0
    return sum(math.comb(r, j) * q**j * (1 - q) ** (r - j) for j in range(v, r + 1))


def _theorem(eps: float, delta: float, m: int, r: int, v: int) -> float:
    """Theorem 3.1's right side with the max over i = 1..m taken literally (f(v - i) = 1 once v - i <= 0)."""
    q = math.exp(eps) / (1 + math.exp(eps))
    f_v = _tail(r, q, v)
    alpha = max((_tail(r, q, v - i) - f_v) / i for i in range(1, m + 1))
    return min(1.0, f_v + 2 * m * delta * alpha)


@pytest.mark.parametrize("eps", [0.0, 0.5, 1.0, 2.5])
@pytest.mark.parametrize("delta", [0.0, 1e-3, 0.02])
@pytest.mark.parametrize("m,r,v", [(10, 10, 8), (12, 6, 6), (20, 10, 3), (8, 4, 0), (15, 14, 11)])
def test_the_tail_bound_is_the_theorem_computed_by_brute_force(eps, delta, m, r, v):
    assert tail_bound(eps, delta, m, r, v) == pytest.approx(_theorem(eps, delta, m, r, v), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("r", [10, 100, 1000])
@pytest.mark.parametrize("beta", [0.05, 0.01])
def test_a_perfect_guesser_without_delta_has_the_closed_form_ceiling(r, beta):
    # q^r = beta  <=>  eps = logit(beta^(1/r))
    q = beta ** (1 / r)
    assert epsilon_ceiling(r, r, 0.0, beta) == pytest.approx(math.log(q / (1 - q)), abs=1e-5)


@pytest.mark.parametrize("m,r,v,delta", [(100, 100, 80, 0.0), (100, 40, 36, 1e-4), (1000, 200, 150, 1e-5)])
def test_the_bound_is_the_largest_refuted_epsilon(m, r, v, delta):
    beta = 0.05
    eps = epsilon_lower_bound(m, r, v, delta, beta)
    assert eps > 0
    assert tail_bound(eps, delta, m, r, v) <= beta
    later = np.linspace(eps + 1e-4, eps + 5, 200)
    assert (tail_bound(later, delta, m, r, v) > beta).all()


def test_chance_guesses_refute_nothing_and_delta_lowers_the_ceiling():
    assert epsilon_lower_bound(100, 100, 50, 0.0) == 0.0
    assert epsilon_lower_bound(100, 0, 0, 0.0) == 0.0
    assert epsilon_ceiling(1000, 1000, 1e-4) < epsilon_ceiling(1000, 1000, 1e-6) < epsilon_ceiling(1000, 1000, 0.0)


def test_guesses_count_the_top_as_in_and_the_bottom_as_out():
    scores = np.array([0.9, 0.1, 0.8, 0.2, 0.5, 0.4])
    coins = np.array([True, False, False, False, True, True])
    assert count_correct(scores, coins, 1) == 2  # 0.9 in (right), 0.1 out (right)
    assert count_correct(scores, coins, 2) == 3  # 0.8 guessed in is out; 0.2 out is right
    assert count_correct(scores, coins, 3) == 4
    assert count_correct(scores, coins, 0) == 0
    assert guess_counts(1000) == [50, 100, 250, 500]
    assert guess_counts(3) == [1]


def test_a_perfect_ranking_reaches_the_ceiling_and_a_random_one_does_not():
    rng = np.random.default_rng(0)
    coins = rng.random(500) < 0.5
    perfect = one_run_audit(coins + rng.normal(0, 0.01, 500), coins, 1e-5)
    assert perfect["epsilon_lower_bound"] == pytest.approx(perfect["epsilon_ceiling"])
    assert 3.5 < perfect["epsilon_ceiling"] < 5
    blind = one_run_audit(rng.normal(size=500), coins, 1e-5)
    assert blind["epsilon_lower_bound"] < 0.5 and blind["epsilon_ceiling"] == perfect["epsilon_ceiling"]
    assert blind["canaries"] == 500 and blind["included"] == coins.sum()


def test_the_bound_is_valid_for_randomized_response_canaries():
    """Each canary's coin revealed by eps0-randomized response (exactly eps0-DP): the bound exceeds eps0 rarely."""
    eps0, m, runs = 1.0, 200, 60
    keep = math.exp(eps0) / (1 + math.exp(eps0))
    rng = np.random.default_rng(1)
    bounds = []
    for _ in range(runs):
        coins = rng.random(m) < 0.5
        said = np.where(rng.random(m) < keep, coins, ~coins)
        bounds.append(one_run_audit(said + rng.random(m) * 1e-3, coins, 0.0, fractions=(0.5,))["epsilon_lower_bound"])
    bounds = np.array(bounds)
    assert (bounds > eps0).mean() <= 0.05
    assert bounds.mean() > 0.2  # and the audit does see the leak


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError):
        tail_bound(1.0, 0.0, 10, 5, 6)
    with pytest.raises(ValueError):
        count_correct([0.1, 0.2], [True, False], 2)
    with pytest.raises(ValueError):
        one_run_audit([0.5], [True], 0.0)
