"""Membership metrics: ROC, AUC, TPR at low FPR, the AUC's p-value and the epsilon lower bound."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from bench.privacy.audit_maths import epsilon_lower_bound_unequal
from bench.privacy.mia._arrays import _check_delta_confidence, _scores_pair, _threshold_counts

# --------------------------------------------------------------------------- metrics


def roc(scores_members: Any, scores_nonmembers: Any) -> tuple[np.ndarray, np.ndarray]:
    """Returns the ROC curve of "member iff score >= t" over every threshold t.

    One point per distinct score plus the origin, in increasing FPR; tied scores move
    together (a diagonal step), as sklearn's ``roc_curve(..., drop_intermediate=False)``.

    Args:
        scores_members: Scores of the members (any shape, flattened).
        scores_nonmembers: Scores of the non-members.

    Returns:
        (fpr, tpr), float64 arrays of equal length from (0, 0) to (1, 1).

    Raises:
        ValueError: An empty side or a NaN score.
    """
    members, nonmembers = _scores_pair(scores_members, scores_nonmembers)
    _, tp, fp = _threshold_counts(members, nonmembers)
    return fp / nonmembers.size, tp / members.size


def auc(scores_members: Any, scores_nonmembers: Any) -> float:
    """Returns the area under the ROC curve, ties counted one half (= sklearn's roc_auc_score).

    Computed as the Mann-Whitney U statistic over ``n_members * n_nonmembers``: the
    probability that a random member outscores a random non-member.

    Args:
        scores_members: Scores of the members.
        scores_nonmembers: Scores of the non-members.
    """
    from scipy import stats

    members, nonmembers = _scores_pair(scores_members, scores_nonmembers)
    ranks = stats.rankdata(np.concatenate([members, nonmembers]))
    u = ranks[: members.size].sum() - members.size * (members.size + 1) / 2.0
    return float(u / (members.size * nonmembers.size))


def tpr_at_fpr(scores_members: Any, scores_nonmembers: Any, fpr: float) -> float:
    """Returns the highest TPR of a threshold whose FPR is at most ``fpr``.

    As Carlini et al. 2022 report it: with ``n`` non-members at most ``floor(fpr * n)``
    of them may be flagged (0.1% of 1,000 non-members: at most 1 false positive). No
    interpolation between thresholds and no tie splitting.

    When ``fpr * n < 1`` (fewer than ``1 / fpr`` non-members) the FPR cannot be measured
    at that level: the only admissible threshold would flag no non-member, which is a
    different, stricter quantity. The result is then NaN.

    Args:
        scores_members: Scores of the members.
        scores_nonmembers: Scores of the non-members.
        fpr: Target false-positive rate in (0, 1].

    Returns:
        The TPR in [0, 1], or NaN when there are too few non-members.
    """
    if not 0.0 < fpr <= 1.0:
        raise ValueError(f"fpr must be in (0, 1], got {fpr!r}")
    members, nonmembers = _scores_pair(scores_members, scores_nonmembers)
    allowed = math.floor(fpr * nonmembers.size + 1e-9)
    if allowed < 1:
        return math.nan
    _, tp, fp = _threshold_counts(members, nonmembers)
    return float(tp[fp <= allowed].max() / members.size)


def auc_pvalue(scores_members: Any, scores_nonmembers: Any) -> float:
    """Returns the one-sided p-value of "AUC > 0.5": members score higher than non-members.

    Mann-Whitney U test, ``scipy.stats.mannwhitneyu(..., alternative="greater")`` (exact
    for small samples without ties, else the normal approximation with tie correction).
    A small value means the attack has a significant advantage.

    Args:
        scores_members: Scores of the members.
        scores_nonmembers: Scores of the non-members.
    """
    from scipy import stats

    members, nonmembers = _scores_pair(scores_members, scores_nonmembers)
    return float(stats.mannwhitneyu(members, nonmembers, alternative="greater").pvalue)


def _epsilon_per_threshold(
    members: np.ndarray, nonmembers: np.ndarray, delta: float, confidence: float
) -> tuple[np.ndarray, np.ndarray]:
    thresholds, tp, fp = _threshold_counts(members, nonmembers)
    bounds = epsilon_lower_bound_unequal(fp, nonmembers.size, members.size - tp, members.size, delta, confidence)
    return thresholds, bounds


def epsilon_at_threshold(
    scores_members: Any, scores_nonmembers: Any, threshold: float, delta: float, confidence: float = 0.95
) -> float:
    """Returns the epsilon lower bound of the fixed test "member iff score >= threshold".

    False positives are non-members flagged (of ``n_nonmembers``), false negatives
    members missed (of ``n_members``); each rate is bounded by a one-sided
    Clopper-Pearson bound at ``1 - (1 - confidence) / 2`` and the pair gives
    ``max(log((1 - delta - FNR) / FPR), log((1 - delta - FPR) / FNR))``, floored at 0
    (:func:`bench.privacy.audit_maths.epsilon_lower_bound_unequal`). Valid at ``confidence``
    only when ``threshold`` does not depend on these scores.

    Args:
        scores_members: Scores of the members.
        scores_nonmembers: Scores of the non-members.
        threshold: The test's threshold.
        delta: The delta of the DP claim, in [0, 1).
        confidence: Joint confidence of the bound.
    """
    _check_delta_confidence(delta, confidence)
    members, nonmembers = _scores_pair(scores_members, scores_nonmembers)
    false_positives = int(np.count_nonzero(nonmembers >= threshold))
    false_negatives = int(np.count_nonzero(~(members >= threshold)))
    return float(epsilon_lower_bound_unequal(false_positives, nonmembers.size, false_negatives, members.size,
                                             delta, confidence))


def empirical_epsilon(scores_members: Any, scores_nonmembers: Any, delta: float, confidence: float = 0.95) -> float:
    """Returns the largest epsilon lower bound over all thresholds, on the same scores.

    :func:`epsilon_at_threshold` for every threshold "member iff score >= t" (t at every
    distinct score), maximised. With no errors at all it is the largest bound the sample
    sizes allow (``bench.privacy.audit_maths.epsilon_lower_bound_unequal(0, n_nonmembers, 0,
    n_members)``).

    Optimistic: choosing the best of many thresholds on the data that is then counted
    lets chance fluctuations in, so the result may exceed the true epsilon more often
    than ``1 - confidence``. Use it as a diagnostic; the reportable bound is
    :func:`split_threshold_epsilon`, which chooses the threshold on held-out scores.

    Args:
        scores_members: Scores of the members.
        scores_nonmembers: Scores of the non-members.
        delta: The delta of the DP claim, in [0, 1).
        confidence: Confidence of each threshold's bound.

    Returns:
        The bound, >= 0 (0 when no threshold shows anything).
    """
    _check_delta_confidence(delta, confidence)
    members, nonmembers = _scores_pair(scores_members, scores_nonmembers)
    _, bounds = _epsilon_per_threshold(members, nonmembers, delta, confidence)
    return float(bounds.max())


def _best_threshold(members: np.ndarray, nonmembers: np.ndarray, delta: float, confidence: float) -> float:
    """The threshold of largest bound on these scores, moved to the middle of its gap."""
    thresholds, bounds = _epsilon_per_threshold(members, nonmembers, delta, confidence)
    best = int(np.argmax(bounds))  # index 0 (+inf, nobody flagged) when nothing shows
    value = thresholds[best]
    if best == 0:
        return math.inf
    if best == thresholds.size - 1:
        return -math.inf  # everybody flagged
    below = thresholds[best + 1]
    middle = 0.5 * (value + below)
    # ">= middle" flags exactly what ">= value" flags here, and leaves room on both sides
    return float(middle) if np.isfinite(middle) and below < middle <= value else float(value)


def split_threshold_epsilon(
    scores_members: Any,
    scores_nonmembers: Any,
    delta: float,
    confidence: float = 0.95,
    seed: int = 0,
    select_fraction: float = 0.5,
) -> float:
    """Returns the reportable epsilon lower bound: threshold chosen on one part, counted on the other.

    Members and non-members are each shuffled with ``numpy.random.default_rng(seed)``;
    the first ``select_fraction`` of each picks the threshold of largest bound (as in
    :func:`empirical_epsilon`, placed midway between that score and the next lower one),
    and the rest gives :func:`epsilon_at_threshold` at that fixed threshold. As the
    threshold is independent of the counted scores, the bound holds with probability at
    least ``confidence`` (given exchangeable members and non-members), at the price of
    half the samples: with no errors it can reach at most the largest bound the
    evaluation part's sizes allow.

    Args:
        scores_members: Scores of the members (at least 2).
        scores_nonmembers: Scores of the non-members (at least 2).
        delta: The delta of the DP claim, in [0, 1).
        confidence: Confidence of the bound.
        seed: Seed of the split.
        select_fraction: Share of each side used to choose the threshold, in (0, 1).

    Returns:
        The bound, >= 0.
    """
    _check_delta_confidence(delta, confidence)
    if not 0.0 < select_fraction < 1.0:
        raise ValueError(f"select_fraction must be in (0, 1), got {select_fraction!r}")
    members, nonmembers = _scores_pair(scores_members, scores_nonmembers)
    rng = np.random.default_rng(seed)
    parts = []
    for values in (members, nonmembers):
        chosen = int(round(values.size * select_fraction))
        if chosen < 1 or chosen >= values.size:
            raise ValueError("each side needs scores in both the selection and the evaluation part")
        shuffled = values[rng.permutation(values.size)]
        parts.append((shuffled[:chosen], shuffled[chosen:]))
    (select_m, eval_m), (select_n, eval_n) = parts
    threshold = _best_threshold(select_m, select_n, delta, confidence)
    return epsilon_at_threshold(eval_m, eval_n, threshold, delta, confidence)


def membership_metrics(
    scores_members: Any, scores_nonmembers: Any, delta: float, seed: int = 0, confidence: float = 0.95
) -> dict[str, float | int]:
    """Returns every membership metric of one attack's scores.

    Args:
        scores_members: Scores of the members.
        scores_nonmembers: Scores of the non-members.
        delta: The delta of the DP claim the epsilon bound is stated at.
        seed: Seed of :func:`split_threshold_epsilon`'s split.
        confidence: Confidence of the epsilon bound.

    Returns:
        ``auc``, ``auc_pvalue``, ``tpr_at_fpr_0.001``, ``tpr_at_fpr_0.01`` (NaN with fewer
        than 1,000 / 100 non-members), ``epsilon_lower_bound``
        (:func:`split_threshold_epsilon`; NaN with fewer than 2 on a side), ``n_members``,
        ``n_nonmembers``.
    """
    members, nonmembers = _scores_pair(scores_members, scores_nonmembers)
    return {
        "auc": auc(members, nonmembers),
        "auc_pvalue": auc_pvalue(members, nonmembers),
        "tpr_at_fpr_0.001": tpr_at_fpr(members, nonmembers, 0.001),
        "tpr_at_fpr_0.01": tpr_at_fpr(members, nonmembers, 0.01),
        "epsilon_lower_bound": (split_threshold_epsilon(members, nonmembers, delta, confidence, seed)
                                if min(members.size, nonmembers.size) >= 2 else math.nan),
        "n_members": int(members.size),
        "n_nonmembers": int(nonmembers.size),
    }
