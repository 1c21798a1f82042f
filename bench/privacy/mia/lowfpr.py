"""The membership privacy score's statistic: TPR at a low FPR the non-member count can resolve.

Carlini et al. (2022) score membership attacks by their true-positive rate at a low
false-positive rate, not by AUC. Rule: the scoring FPR is the smallest of
:data:`FPR_LADDER` at which at least :data:`MIN_FALSE_POSITIVES` non-members may be flagged
(``fpr * n_nonmembers >= 10``): 1e-2 at 1,000 non-members, 1e-1 at 100, 1e-3 from 10,000.
Fewer flagged non-members would make the threshold rest on one or two scores. A guess
that ignores the model flags members as often as non-members, so chance TPR at FPR ``f``
is ``f``.

The TPR is a two-sample statistic: the threshold is estimated from the non-members (the
score that lets ``floor(f * n)`` of them through), and the TPR is counted on the members
at that threshold. Its uncertainty has both parts, and at a low FPR the threshold's is
usually the larger one (a small change of the estimated FPR moves the TPR by the ROC's
slope there, often 10 or more). So:

- :func:`bootstrap_tpr`: the standard error and percentile interval from a seeded
  bootstrap that resamples members and non-members and re-estimates the threshold in
  every replicate;
- :func:`tpr_pvalue`: the exact p-value of the member count against chance when members
  and non-members are exchangeable (a hypergeometric tail, not the binomial one, which
  treats the threshold as known and is too small).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from bench.privacy.mia._arrays import _scores_pair
from bench.privacy.mia.metrics import tpr_at_fpr

FPR_LADDER = (0.001, 0.01, 0.1)
"""The FPRs a score may be stated at, lowest first."""
MIN_FALSE_POSITIVES = 10
"""Non-members the threshold may flag at the scoring FPR, at least."""
BOOTSTRAP_REPLICATES = 1000
"""Bootstrap replicates of the TPR's standard error and interval."""


def scoring_fpr(n_nonmembers: int) -> float:
    """Returns the lowest FPR of :data:`FPR_LADDER` that ``n_nonmembers`` resolve (see the module).

    Fewer than 100 non-members resolve none of them: the highest, 0.1, is returned and
    :func:`coarse` says so (its TPR rests on fewer than 10 flagged non-members, or is NaN
    below 10 non-members).
    """
    for fpr in FPR_LADDER:
        if fpr * n_nonmembers >= MIN_FALSE_POSITIVES - 1e-9:
            return fpr
    return FPR_LADDER[-1]


def coarse(n_nonmembers: int) -> bool:
    """Returns whether ``n_nonmembers`` are too few to resolve even the highest FPR of the ladder."""
    return FPR_LADDER[-1] * n_nonmembers < MIN_FALSE_POSITIVES - 1e-9


def allowed_false_positives(n_nonmembers: int, fpr: float) -> int:
    """Returns how many of ``n_nonmembers`` the threshold may flag at ``fpr``: ``floor(fpr * n)``."""
    return math.floor(fpr * n_nonmembers + 1e-9)


def _tp_counts(members: np.ndarray, nonmembers: np.ndarray, allowed: int) -> np.ndarray:
    """Members flagged at the threshold estimated from the non-members, one count per row.

    ``members`` [R, m] and ``nonmembers`` [R, n]: each row is one sample. The highest TPR
    of a threshold that flags at most ``allowed`` non-members (:func:`tpr_at_fpr`) counts
    the members strictly above the ``allowed + 1``-th largest non-member score.
    """
    n = nonmembers.shape[1]
    if allowed >= n:
        return np.full(members.shape[0], members.shape[1], dtype=np.int64)
    kth = n - allowed - 1  # ascending position of the (allowed + 1)-th largest
    cut = np.partition(nonmembers, kth, axis=1)[:, kth]
    return (members > cut[:, None]).sum(axis=1)


def bootstrap_tpr(scores_members: Any, scores_nonmembers: Any, fpr: float,
                  replicates: int = BOOTSTRAP_REPLICATES, seed: int = 0,
                  confidence: float = 0.95) -> dict[str, float]:
    """Returns the bootstrap standard error and percentile interval of the TPR at ``fpr``.

    Each replicate draws the members and the non-members with replacement (each side its
    own size; ``numpy.random.default_rng(seed)``), estimates the threshold again from the
    drawn non-members, and counts the drawn members above it. The spread of the replicates
    thus includes the threshold's estimation, which a binomial error over the members alone
    leaves out.

    Args:
        scores_members: Scores of the members (higher: member).
        scores_nonmembers: Scores of the non-members.
        fpr: The FPR (at least one non-member must be allowed to be flagged).
        replicates: Bootstrap replicates (at least 2).
        seed: Seed of the draws (deterministic).
        confidence: Coverage of the percentile interval.

    Returns:
        ``tpr_se`` (standard deviation of the replicates), ``tpr_low`` and ``tpr_high``
        (their ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles); NaN when
        ``fpr`` times the non-member count is below 1.
    """
    if replicates < 2:
        raise ValueError(f"replicates must be at least 2, got {replicates}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    members, nonmembers = _scores_pair(scores_members, scores_nonmembers)
    allowed = allowed_false_positives(nonmembers.size, fpr)
    if allowed < 1:
        return {"tpr_se": math.nan, "tpr_low": math.nan, "tpr_high": math.nan}
    rng = np.random.default_rng(seed)
    chunk = max(1, min(replicates, 4_000_000 // (members.size + nonmembers.size)))  # about 32 MB a chunk
    tprs = []
    for start in range(0, replicates, chunk):
        rows = min(chunk, replicates - start)
        drawn_m = members[rng.integers(0, members.size, (rows, members.size))]
        drawn_n = nonmembers[rng.integers(0, nonmembers.size, (rows, nonmembers.size))]
        tprs.append(_tp_counts(drawn_m, drawn_n, allowed) / members.size)
    values = np.concatenate(tprs)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(values, [tail, 1.0 - tail])
    return {"tpr_se": float(values.std(ddof=1)), "tpr_low": float(low), "tpr_high": float(high)}


def tpr_pvalue(flagged: int, n_members: int, n_nonmembers: int, fpr: float) -> float:
    """Returns the one-sided p-value of ``flagged`` members at the threshold estimated at ``fpr``.

    Under the null hypothesis the attack cannot tell members from non-members: the scores
    are exchangeable, and every order of the ``m + n`` scores is equally likely. With ``k``
    non-members allowed above the threshold, at least ``x`` members are flagged iff the top
    ``x + k`` scores hold at least ``x`` members, so
    ``P(X >= x) = P(Hypergeometric(m + n, m, x + k) >= x)``: exact (ties broken at random),
    and larger than the binomial tail, which ignores that the threshold is estimated.

    Args:
        flagged: Members flagged (``x``).
        n_members: Members (``m``).
        n_nonmembers: Non-members (``n``).
        fpr: The FPR the threshold was set at.

    Returns:
        The p-value; NaN when ``fpr`` times the non-member count is below 1.
    """
    from scipy import stats

    allowed = allowed_false_positives(n_nonmembers, fpr)
    if allowed < 1:
        return math.nan
    if flagged <= 0:
        return 1.0
    total = n_members + n_nonmembers
    return float(stats.hypergeom.sf(flagged - 1, total, n_members, min(flagged + allowed, total)))


def tpr_with_se(scores_members: Any, scores_nonmembers: Any, fpr: float, seed: int = 0,
                replicates: int = BOOTSTRAP_REPLICATES, confidence: float = 0.95) -> dict[str, float]:
    """Returns the TPR at ``fpr`` with its bootstrap standard error, interval and p-value against chance.

    Args:
        scores_members: Scores of the members (higher: member).
        scores_nonmembers: Scores of the non-members.
        fpr: The scoring FPR (at least one non-member must be allowed to be flagged).
        seed: Seed of the bootstrap.
        replicates: Bootstrap replicates.
        confidence: Coverage of the interval.

    Returns:
        ``tpr``; ``tpr_se``, ``tpr_low``, ``tpr_high`` (:func:`bootstrap_tpr`: members and
        non-members resampled, the threshold estimated again each time); ``tpr_se_binomial``
        (``sqrt(tpr (1 - tpr) / n_members)``, the members' part alone, for comparison);
        ``tpr_pvalue`` (:func:`tpr_pvalue`). All NaN when ``fpr`` times the non-member
        count is below 1.
    """
    members, nonmembers = _scores_pair(scores_members, scores_nonmembers)
    tpr = tpr_at_fpr(members, nonmembers, fpr)
    if math.isnan(tpr):  # not even one non-member may be flagged at this FPR
        return {k: math.nan for k in ("tpr", "tpr_se", "tpr_low", "tpr_high", "tpr_se_binomial", "tpr_pvalue")}
    flagged = int(round(tpr * members.size))
    return {
        "tpr": tpr,
        **bootstrap_tpr(members, nonmembers, fpr, replicates, seed, confidence),
        "tpr_se_binomial": math.sqrt(tpr * (1.0 - tpr) / members.size),
        "tpr_pvalue": tpr_pvalue(flagged, members.size, nonmembers.size, fpr),
    }
