"""Membership-inference maths against sklearn, scipy, closed forms and synthetic attacks."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import optimize, stats
from sklearn.metrics import roc_auc_score, roc_curve

from bench.privacy.audit_maths import clopper_pearson_upper, epsilon_lower_bound, epsilon_lower_bound_unequal
from bench.privacy.mia import (
    auc,
    auc_pvalue,
    empirical_epsilon,
    epsilon_at_threshold,
    label_probabilities,
    lira_offline_scores,
    logit_scale,
    loss_scores,
    membership_metrics,
    rmia_scores,
    roc,
    scaled_logit_confidence,
    split_threshold_epsilon,
    tpr_at_fpr,
)


def _sklearn_inputs(members, nonmembers):
    y = np.r_[np.ones(len(members)), np.zeros(len(nonmembers))]
    return y, np.r_[members, nonmembers]


# ----------------------------------------------------------------- ROC, AUC, TPR at FPR


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auc_and_roc_match_sklearn_on_continuous_scores(seed):
    rng = np.random.default_rng(seed)
    members, nonmembers = rng.normal(0.3, 1, 300), rng.normal(0, 1, 517)
    y, s = _sklearn_inputs(members, nonmembers)
    assert auc(members, nonmembers) == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    fpr, tpr = roc(members, nonmembers)
    ref_fpr, ref_tpr, _ = roc_curve(y, s, drop_intermediate=False)
    np.testing.assert_allclose(fpr, ref_fpr, atol=1e-12)
    np.testing.assert_allclose(tpr, ref_tpr, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1])
def test_auc_and_roc_match_sklearn_with_ties(seed):
    rng = np.random.default_rng(seed)
    members = rng.integers(0, 6, 400).astype(float)  # heavy ties within and across groups
    nonmembers = rng.integers(0, 5, 250).astype(float)
    y, s = _sklearn_inputs(members, nonmembers)
    assert auc(members, nonmembers) == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    fpr, tpr = roc(members, nonmembers)
    ref_fpr, ref_tpr, _ = roc_curve(y, s, drop_intermediate=False)
    np.testing.assert_allclose(fpr, ref_fpr, atol=1e-12)
    np.testing.assert_allclose(tpr, ref_tpr, atol=1e-12)
    assert np.trapezoid(tpr, fpr) == pytest.approx(auc(members, nonmembers), abs=1e-12)
    # all scores tied: one diagonal step, AUC one half
    assert auc(np.zeros(5), np.zeros(7)) == 0.5
    fpr, tpr = roc(np.zeros(5), np.zeros(7))
    np.testing.assert_array_equal(fpr, [0, 1]) and np.testing.assert_array_equal(tpr, [0, 1])


def test_tied_infinities_stay_tied():
    members = np.array([np.inf, np.inf, 1.0])
    nonmembers = np.array([np.inf, -np.inf, -np.inf])
    # pairs: inf-inf tie 2 x 1/2, inf > -inf 4, 1 > -inf 2: (1 + 4 + 2) / 9 (sklearn rejects inf)
    assert auc(members, nonmembers) == pytest.approx(7 / 9)
    fpr, tpr = roc(members, nonmembers)
    np.testing.assert_allclose(fpr, [0, 1 / 3, 1 / 3, 1])  # origin, inf, 1, -inf
    np.testing.assert_allclose(tpr, [0, 2 / 3, 1, 1])


def test_perfect_separation():
    members, nonmembers = np.linspace(1, 2, 500), np.linspace(-2, 0, 1000)
    assert auc(members, nonmembers) == 1.0
    assert tpr_at_fpr(members, nonmembers, 0.001) == 1.0
    assert tpr_at_fpr(members, nonmembers, 0.01) == 1.0
    assert auc(nonmembers, members) == 0.0
    assert tpr_at_fpr(nonmembers, members, 0.01) == 0.0


def test_tpr_at_fpr_allows_floor_of_fpr_times_n_false_positives():
    # 1,000 non-members at 0..999, members at 998.5 (x 30) and 997.5 (x 70):
    # at most 1 false positive (999 flagged) admits only the threshold 998.5 -> TPR 0.3;
    # at 1% FPR (10 false positives) everything above 989.5 -> TPR 1.
    nonmembers = np.arange(1000.0)
    members = np.r_[np.full(30, 998.5), np.full(70, 997.5)]
    assert tpr_at_fpr(members, nonmembers, 0.001) == pytest.approx(0.3)
    assert tpr_at_fpr(members, nonmembers, 0.002) == pytest.approx(1.0)  # 2 FPs: 998 flagged
    assert tpr_at_fpr(members, nonmembers, 0.01) == 1.0
    # a tie between a member and a non-member flags both: 998.5 shared by 2 non-members
    tied_nonmembers = np.r_[np.arange(998.0), 998.5, 998.5]
    assert tpr_at_fpr(members, tied_nonmembers, 0.001) == 0.0  # 998.5 costs 2 FPs, nothing else fits
    assert tpr_at_fpr(members, tied_nonmembers, 0.002) == 1.0  # 997.5 flags the same 2 non-members


def test_tpr_at_fpr_is_nan_with_fewer_than_one_over_fpr_nonmembers():
    rng = np.random.default_rng(0)
    assert math.isnan(tpr_at_fpr(rng.normal(size=50), rng.normal(size=999), 0.001))
    assert not math.isnan(tpr_at_fpr(rng.normal(size=50), rng.normal(size=1000), 0.001))
    assert not math.isnan(tpr_at_fpr(rng.normal(size=50), rng.normal(size=100), 0.01))
    with pytest.raises(ValueError):
        tpr_at_fpr([1.0], [0.0], 0.0)


def test_bad_inputs_are_rejected():
    with pytest.raises(ValueError):
        auc([], [1.0])
    with pytest.raises(ValueError):
        auc([np.nan, 1.0], [0.0])
    with pytest.raises(ValueError):
        empirical_epsilon([1.0], [0.0], delta=1.0)


def test_identical_distributions_show_nothing():
    rng = np.random.default_rng(1234)
    members, nonmembers = rng.normal(size=20000), rng.normal(size=20000)
    assert auc(members, nonmembers) == pytest.approx(0.5, abs=0.01)
    assert auc_pvalue(members, nonmembers) > 0.05
    assert split_threshold_epsilon(members, nonmembers, delta=0.0) == 0.0
    # the best of 20,000 thresholds on the same data finds a spurious edge (0.058 here,
    # > 0 for 3 of seeds 0..19): why only the split bound is reported
    assert 0.0 <= empirical_epsilon(members, nonmembers, delta=0.0) < 0.1


def test_gaussian_shift_auc_is_phi_of_shift_over_root_two():
    rng = np.random.default_rng(7)
    members, nonmembers = rng.normal(1, 1, 20000), rng.normal(0, 1, 20000)
    expected = stats.norm.cdf(1 / math.sqrt(2))  # 0.7602
    assert expected == pytest.approx(0.7602, abs=1e-4)
    assert auc(members, nonmembers) == pytest.approx(expected, abs=0.01)
    assert auc_pvalue(members, nonmembers) < 1e-100


def test_auc_pvalue_is_scipy_mann_whitney_greater():
    rng = np.random.default_rng(3)
    members, nonmembers = rng.normal(0.2, 1, 80), rng.normal(0, 1, 60)
    expected = stats.mannwhitneyu(members, nonmembers, alternative="greater").pvalue
    assert auc_pvalue(members, nonmembers) == pytest.approx(expected, rel=1e-12)
    assert auc_pvalue(np.arange(10.0) + 100, np.arange(10.0)) < 1e-4


# ----------------------------------------------------------------- epsilon lower bounds


def test_unequal_trials_bound_generalises_the_audit_bound():
    assert epsilon_lower_bound_unequal(12, 500, 300, 500, 1e-5, 0.9) == pytest.approx(
        float(epsilon_lower_bound(12, 300, 500, 1e-5, 0.9)), rel=1e-12)
    fpr = clopper_pearson_upper(3, 800, 0.975)
    fnr = clopper_pearson_upper(410, 1200, 0.975)
    expected = max(math.log((1 - fnr) / fpr), math.log((1 - fpr) / fnr))
    assert epsilon_lower_bound_unequal(3, 800, 410, 1200) == pytest.approx(expected, rel=1e-12)


def test_perfect_separation_bound_is_the_clopper_pearson_maximum():
    n = 10000
    members, nonmembers = np.arange(n) + n + 0.5, np.arange(n, dtype=float)
    expected = float(epsilon_lower_bound(0, 0, n, 0.0, 0.95))
    p = 1 - 0.025 ** (1 / n)  # by hand: both rates' bound with no errors
    assert expected == pytest.approx(math.log((1 - p) / p), rel=1e-12)
    assert empirical_epsilon(members, nonmembers, delta=0.0) == pytest.approx(expected, rel=1e-12)
    assert empirical_epsilon(members, nonmembers, delta=1e-5) == pytest.approx(
        float(epsilon_lower_bound(0, 0, n, 1e-5, 0.95)), rel=1e-12)
    # the split version counts the evaluation half only, and its midpoint threshold keeps it error-free
    assert split_threshold_epsilon(members, nonmembers, delta=0.0) == pytest.approx(
        float(epsilon_lower_bound(0, 0, n // 2, 0.0, 0.95)), rel=1e-12)
    # unequal sides: the rates are bounded with their own counts
    p_m, p_n = 1 - 0.025 ** (1 / 3000), 1 - 0.025 ** (1 / n)
    by_hand = max(math.log((1 - p_m) / p_n), math.log((1 - p_n) / p_m))
    assert empirical_epsilon(members[:3000], nonmembers, delta=0.0) == pytest.approx(by_hand, rel=1e-12)


def test_epsilon_at_threshold_counts_both_errors():
    members, nonmembers = np.array([0.0, 1, 2, 3, 4]), np.array([-1.0, 0, 1, 2, 2.5])
    # member iff >= 2: false positives 2 (2, 2.5) of 5, false negatives 2 (0, 1) of 5
    assert epsilon_at_threshold(members, nonmembers, 2.0, 0.0) == pytest.approx(
        float(epsilon_lower_bound(2, 2, 5)))


def _randomised_response(n, eps, rng):
    flag = math.exp(eps) / (1 + math.exp(eps))
    return (rng.random(n) < flag).astype(float), (rng.random(n) < 1 - flag).astype(float)


def test_randomised_response_bound_is_below_and_close_to_its_epsilon():
    # members flagged with probability e/(1+e), non-members with 1/(1+e): exactly 1-DP
    members, nonmembers = _randomised_response(100_000, 1.0, np.random.default_rng(11))
    same_data = empirical_epsilon(members, nonmembers, delta=0.0)
    split = split_threshold_epsilon(members, nonmembers, delta=0.0, seed=0)
    assert 0.7 < same_data <= 1.0
    assert 0.7 < split <= 1.0


def test_split_bound_is_sound_at_its_confidence():
    # repeated randomised-response experiments: the bound may exceed the true 1 in at most 5%
    rng = np.random.default_rng(5)
    exceeded = 0
    runs = 300
    for run in range(runs):
        members, nonmembers = _randomised_response(2000, 1.0, rng)
        exceeded += split_threshold_epsilon(members, nonmembers, delta=0.0, seed=run) > 1.0
    assert exceeded / runs <= 0.05


def _gaussian_epsilon(mu, delta):
    # the (eps, delta) curve of N(mu, 1) vs N(0, 1) (Balle & Wang 2018, Thm. 8)
    def excess(eps):
        return stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2) - delta
    return optimize.brentq(excess, 0.0, 50.0)


def test_gaussian_shift_bound_stays_below_the_mechanism_epsilon():
    mu, delta = 1.0, 1e-3
    true_eps = _gaussian_epsilon(mu, delta)
    rng = np.random.default_rng(21)
    members, nonmembers = rng.normal(mu, 1, 20000), rng.normal(0, 1, 20000)
    same_data = empirical_epsilon(members, nonmembers, delta)
    split = split_threshold_epsilon(members, nonmembers, delta)
    assert 0.0 < split <= same_data <= true_eps
    assert same_data > 0.5  # a real shift shows up


# ----------------------------------------------------------------- attack scores


def test_loss_scores_are_minus_cross_entropy():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(20, 5)) * 10
    labels = rng.integers(0, 5, 20)
    log_softmax = logits - np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1, keepdims=True)) \
        - logits.max(1, keepdims=True)
    expected = log_softmax[np.arange(20), labels]
    np.testing.assert_allclose(loss_scores(logits, labels), expected, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(loss_scores(torch.tensor(logits, dtype=torch.float32), torch.tensor(labels)),
                               expected, rtol=1e-5)
    np.testing.assert_allclose(label_probabilities(logits, labels), np.exp(expected), rtol=1e-12)
    assert np.all(np.isfinite(loss_scores(np.array([[1e4, -1e4]]), np.array([1]))))


def test_scaled_logit_confidence_is_exact_where_probabilities_round_to_one():
    logits = np.array([[2.0, 0.5, -1.0], [60.0, 0.0, 0.0], [-60.0, 0.0, 0.0]])
    labels = np.array([0, 0, 0])
    phi = scaled_logit_confidence(logits, labels)
    p = label_probabilities(logits[:1], labels[:1])
    assert phi[0] == pytest.approx(float(logit_scale(p)[0]), rel=1e-10)
    assert phi[1] == pytest.approx(60 - math.log(2), rel=1e-12)  # p rounds to 1 in float64
    assert phi[2] == pytest.approx(-60 - math.log(2), rel=1e-12)
    clipped = logit_scale(np.array([0.0, 1.0]))
    assert np.all(np.isfinite(clipped)) and clipped[0] == pytest.approx(-clipped[1])


def _synthetic_population(rng, n, models, shift):
    """Per-example difficulty; members' target confidence is raised by ``shift`` logits."""
    difficulty = rng.normal(0.0, 1.5, n)
    refs = difficulty[:, None] + rng.normal(0, 0.5, (n, models))
    target = difficulty + rng.normal(0, 0.5, n)
    member = np.zeros(n, bool)
    member[: n // 2] = True
    target[member] += shift
    sigmoid = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    return sigmoid(target), sigmoid(refs), member


@pytest.mark.parametrize("shift,low,high", [(2.0, 0.9, 1.0), (0.0, 0.45, 0.55)])
def test_rmia_separates_inflated_members_and_not_a_null(shift, low, high):
    rng = np.random.default_rng(2)
    target_x, refs_x, member = _synthetic_population(rng, 4000, 4, shift)
    target_z, refs_z, _ = _synthetic_population(rng, 3000, 4, 0.0)
    scores = rmia_scores(target_x, refs_x, target_z, refs_z, a=0.3)
    assert scores.shape == (4000,) and scores.min() >= 0 and scores.max() <= 1
    assert low < auc(scores[member], scores[~member]) < high


@pytest.mark.parametrize("gamma,a", [(1.0, 0.3), (2.0, 0.0), (0.5, 1.0)])
def test_rmia_counts_equal_the_pairwise_definition(gamma, a):
    rng = np.random.default_rng(4)
    target_x, refs_x = rng.random(300), rng.random((300, 3))
    target_z, refs_z = rng.random(200), rng.random((200, 5))
    target_x[:5] = 0.0  # zero probabilities are allowed
    pr_x = 0.5 * ((1 + a) * refs_x.mean(1) + (1 - a))
    pr_z = 0.5 * ((1 + a) * refs_z.mean(1) + (1 - a))
    pairwise = ((target_x / pr_x)[:, None] / (target_z / pr_z)[None, :] > gamma).mean(1)
    np.testing.assert_array_equal(rmia_scores(target_x, refs_x, target_z, refs_z, a=a, gamma=gamma), pairwise)


def test_rmia_rejects_bad_arguments():
    with pytest.raises(ValueError):
        rmia_scores([0.5], [[0.5]], [0.5], [[0.5]], a=1.5)
    with pytest.raises(ValueError):
        rmia_scores([0.5], [[0.5]], [0.5], [[0.5]], gamma=0.0)
    with pytest.raises(ValueError):
        rmia_scores([1.5], [[0.5]], [0.5], [[0.5]])
    with pytest.raises(ValueError):
        rmia_scores([0.5, 0.5], [[0.5]], [0.5], [[0.5]])


@pytest.mark.parametrize("shift,low,high", [(2.0, 0.9, 1.0), (0.0, 0.45, 0.55)])
@pytest.mark.parametrize("models", [4, 80])
def test_lira_separates_inflated_members_and_not_a_null(shift, low, high, models):
    rng = np.random.default_rng(3)
    target, refs, member = _synthetic_population(rng, 4000, models, shift)
    scores = lira_offline_scores(target, refs)
    assert scores.shape == (4000,) and np.all((scores >= 0) & (scores <= 1))
    assert low < auc(scores[member], scores[~member]) < high


def test_lira_global_and_per_example_variance_by_hand():
    phi_refs = np.array([[0.0, 1.0, 2.0], [1.0, 1.0, 4.0]])  # variances 1 and 3, pooled 2
    phi_target = np.array([3.0, 0.0])
    glob = lira_offline_scores(phi_target, phi_refs, scaled=True)
    np.testing.assert_allclose(glob, stats.norm.cdf([(3 - 1) / math.sqrt(2), (0 - 2) / math.sqrt(2)]))
    local = lira_offline_scores(phi_target, phi_refs, scaled=True, global_variance=False)
    np.testing.assert_allclose(local, stats.norm.cdf([2.0, -2 / math.sqrt(3)]))
    logged = lira_offline_scores(phi_target, phi_refs, scaled=True, log=True)
    np.testing.assert_allclose(logged, np.log(glob))


def test_lira_is_stable_at_probabilities_zero_and_one():
    target = np.array([1.0, 0.0, 0.5, 1.0 - 1e-9])
    refs = np.array([[0.9, 0.99], [0.0, 0.0], [0.5, 0.6], [1.0, 1.0]])
    scores = lira_offline_scores(target, refs)
    assert np.all(np.isfinite(scores))
    with pytest.raises(ValueError):
        lira_offline_scores(target, refs[:, :1])
    # with saturated scores the log form keeps the order that Phi loses
    # (sigma = 0.1414: z = 9.2, 10.6, 12.0, where Phi is 1.0 in float64)
    phi_refs = np.zeros((3, 2)) + np.array([[-0.1, 0.1]])
    assert np.all(lira_offline_scores([1.3, 1.5, 1.7], phi_refs, scaled=True) == 1.0)
    logged = lira_offline_scores([1.3, 1.5, 1.7], phi_refs, scaled=True, log=True)
    assert np.all(np.diff(logged) > 0)


# ----------------------------------------------------------------- the report


def test_membership_metrics_reports_every_key():
    rng = np.random.default_rng(9)
    members, nonmembers = rng.normal(1, 1, 3000), rng.normal(0, 1, 2000)
    report = membership_metrics(members, nonmembers, delta=1e-5, seed=3)
    assert set(report) == {"auc", "auc_pvalue", "tpr_at_fpr_0.001", "tpr_at_fpr_0.01",
                           "epsilon_lower_bound", "n_members", "n_nonmembers"}
    assert report["auc"] == auc(members, nonmembers)
    assert report["tpr_at_fpr_0.001"] == tpr_at_fpr(members, nonmembers, 0.001)
    assert report["epsilon_lower_bound"] == split_threshold_epsilon(members, nonmembers, 1e-5, seed=3)
    assert report["n_members"] == 3000 and report["n_nonmembers"] == 2000
    small = membership_metrics(members[:50], nonmembers[:50], delta=0.0)
    assert math.isnan(small["tpr_at_fpr_0.001"]) and math.isnan(small["tpr_at_fpr_0.01"])
    assert math.isnan(membership_metrics([1.0], [0.0, 0.5], delta=0.0)["epsilon_lower_bound"])
