"""Reference-model attacks (LiRA online, RMIA with OUT models and its chosen a) and the low-FPR score."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from bench.privacy.mia import auc, rmia_scores, tpr_at_fpr
from bench.privacy.mia.lowfpr import coarse, scoring_fpr, tpr_with_se
from bench.privacy.mia.references import (
    A_GRID,
    choose_rmia_a,
    lira_online_scores,
    reference_keep,
    rmia_out_scores,
)

# ----------------------------------------------------------------- the scoring FPR and its error


@pytest.mark.parametrize("n,fpr", [(100, 0.1), (999, 0.1), (1000, 0.01), (5000, 0.01), (10000, 0.001), (50, 0.1)])
def test_the_scoring_fpr_is_the_lowest_with_ten_false_positives(n, fpr):
    assert scoring_fpr(n) == fpr
    assert coarse(n) == (n < 100)


def test_the_tpr_has_a_bootstrap_error_and_an_exact_p_value_against_chance():
    members = np.r_[np.full(30, 10.0), np.arange(70) / 100]
    nonmembers = np.arange(100) / 100 + 0.005
    got = tpr_with_se(members, nonmembers, 0.1)
    assert got["tpr"] == tpr_at_fpr(members, nonmembers, 0.1) == pytest.approx(0.30)
    # the members' binomial part alone stays reported beside the bootstrap error, which is not below it here
    assert got["tpr_se_binomial"] == pytest.approx(math.sqrt(0.3 * 0.7 / 100))
    assert got["tpr_se"] >= 0.8 * got["tpr_se_binomial"] and got["tpr_low"] <= 0.3 <= got["tpr_high"]
    # 30 members above the 11th largest non-member: at least 30 of the top 40 of 200 exchangeable scores
    assert got["tpr_pvalue"] == pytest.approx(stats.hypergeom.sf(29, 200, 100, 40))
    assert got["tpr_pvalue"] > stats.binomtest(30, 100, 0.1, alternative="greater").pvalue
    assert all(math.isnan(v) for v in tpr_with_se(members, nonmembers[:5], 0.1).values())


# ----------------------------------------------------------------- who trains on what


def test_online_keeps_every_example_in_half_of_the_models():
    keep = reference_keep(500, 6, True, np.random.default_rng(0))
    assert keep.shape == (500, 6) and (keep.sum(axis=1) == 3).all()
    offline = reference_keep(4000, 2, False, np.random.default_rng(0))
    assert abs(offline.mean() - 0.5) < 0.03 and not (offline[:, 0] == offline[:, 1]).all()
    with pytest.raises(ValueError):
        reference_keep(10, 3, True, np.random.default_rng(0))


# ----------------------------------------------------------------- LiRA online


def test_lira_online_is_the_gaussian_likelihood_ratio():
    refs = np.array([[1.0, 2.0, 5.0, 7.0], [0.0, 0.5, -1.0, -2.0]])
    keep = np.array([[False, False, True, True], [True, True, False, False]])
    target = np.array([4.0, 0.2])
    got = lira_online_scores(target, refs, keep, global_variance=False)
    want0 = (stats.norm.logpdf(4.0, 6.0, np.std([5, 7], ddof=1))
             - stats.norm.logpdf(4.0, 1.5, np.std([1, 2], ddof=1)))
    want1 = (stats.norm.logpdf(0.2, 0.25, np.std([0, 0.5], ddof=1))
             - stats.norm.logpdf(0.2, -1.5, np.std([-1, -2], ddof=1)))
    assert got == pytest.approx([want0, want1])
    pooled = lira_online_scores(target, refs, keep, global_variance=True)
    var_in = np.mean([np.var([5, 7], ddof=1), np.var([0, 0.5], ddof=1)])  # pooled within-example variances
    var_out = np.mean([np.var([1, 2], ddof=1), np.var([-1, -2], ddof=1)])
    assert pooled[0] == pytest.approx(stats.norm.logpdf(4.0, 6.0, math.sqrt(var_in))
                                      - stats.norm.logpdf(4.0, 1.5, math.sqrt(var_out)))


def test_lira_online_finds_members_on_synthetic_models():
    rng = np.random.default_rng(0)
    n, k = 400, 8
    keep = reference_keep(n, k, True, rng)
    difficulty = rng.normal(0, 2, n)  # per-example offsets that a global threshold cannot see
    refs = difficulty[:, None] + np.where(keep, 1.5, 0.0) + rng.normal(0, 0.5, (n, k))
    member = rng.random(n) < 0.5
    target = difficulty + np.where(member, 1.5, 0.0) + rng.normal(0, 0.5, n)
    s = lira_online_scores(target, refs, keep)
    assert auc(s[member], s[~member]) > 0.9 > auc(target[member], target[~member])
    with pytest.raises(ValueError):
        lira_online_scores(target[:2], refs[:2, :3], np.array([[True, True, False]] * 2))


# ----------------------------------------------------------------- RMIA with OUT models, and its a


def test_rmia_with_out_models_uses_each_candidates_own_out_mean():
    rng = np.random.default_rng(0)
    px, refs, pz, refs_z = rng.random(20), rng.random((20, 3)), rng.random(50), rng.random((50, 3))
    out = np.ones((20, 3), dtype=bool)
    out[:, 1] = False
    got = rmia_out_scores(px, refs, out, pz, refs_z, a=0.4)
    want = rmia_scores(px, refs[:, [0, 2]], pz, refs_z, a=0.4)
    assert got == pytest.approx(want)
    out[3] = False
    with pytest.raises(ValueError, match="OUT"):
        rmia_out_scores(px, refs, out, pz, refs_z, a=0.4)


def _reference_world(models: int, n: int = 600, seed: int = 0):
    """Probabilities of the true label under models that raise their members' probability."""
    rng = np.random.default_rng(seed)
    keep = reference_keep(n, models, False, rng)
    base = rng.beta(2, 2, n)
    probs = np.clip(base[:, None] + np.where(keep, 0.25, 0.0) + rng.normal(0, 0.05, (n, models)), 0, 1)
    probs_z = np.clip(rng.beta(2, 2, 300)[:, None] + rng.normal(0, 0.05, (300, models)), 0, 1)
    return probs, keep, probs_z


def test_rmia_a_is_chosen_on_the_reference_models_alone():
    probs, keep, probs_z = _reference_world(3)
    got = choose_rmia_a(probs, keep, probs_z, fpr=0.1)
    assert got["a"] in A_GRID and got["games"] == 3 and got["tpr"] > 0.2
    again = choose_rmia_a(probs, keep, probs_z, fpr=0.1)
    assert again == got
    # the winner's TPR is the best of the grid, recomputed game by game
    def mean_tpr(a):
        tprs = []
        for j in range(3):
            others = [k for k in range(3) if k != j]
            out = ~keep[:, others]
            rows = out.any(axis=1)
            s = rmia_out_scores(probs[rows, j], probs[rows][:, others], out[rows], probs_z[:, j],
                                probs_z[:, others], a)
            m = keep[rows, j]
            tprs.append(tpr_at_fpr(s[m], s[~m], 0.1))
        return np.mean(tprs)
    assert got["tpr"] == pytest.approx(max(mean_tpr(a) for a in A_GRID))
    assert choose_rmia_a(probs[:, :1], keep[:, :1], probs_z[:, :1], fpr=0.1) is None
