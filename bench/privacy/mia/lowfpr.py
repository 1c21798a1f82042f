"""The membership privacy score's statistic: TPR at a low FPR the non-member count can resolve.

Carlini et al. (2022) score membership attacks by their true-positive rate at a low
false-positive rate, not by AUC. Rule: the scoring FPR is the smallest of
:data:`FPR_LADDER` at which at least :data:`MIN_FALSE_POSITIVES` non-members may be flagged
(``fpr * n_nonmembers >= 10``): 1e-2 at 1,000 non-members, 1e-1 at 100, 1e-3 from 10,000.
Fewer flagged non-members would make the threshold rest on one or two scores. A guess
that ignores the model flags members as often as non-members, so chance TPR at FPR ``f``
is ``f``. The TPR's standard error is binomial over the members.
"""

from __future__ import annotations

import math
from typing import Any

from bench.privacy.mia._arrays import _scores_pair
from bench.privacy.mia.metrics import tpr_at_fpr

FPR_LADDER = (0.001, 0.01, 0.1)
"""The FPRs a score may be stated at, lowest first."""
MIN_FALSE_POSITIVES = 10
"""Non-members the threshold may flag at the scoring FPR, at least."""


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


def tpr_with_se(scores_members: Any, scores_nonmembers: Any, fpr: float) -> dict[str, float]:
    """Returns the TPR at ``fpr`` with its binomial standard error and one-sided p-value against chance.

    Args:
        scores_members: Scores of the members (higher: member).
        scores_nonmembers: Scores of the non-members.
        fpr: The scoring FPR (at least one non-member must be allowed to be flagged).

    Returns:
        ``tpr``, ``tpr_se`` (``sqrt(tpr (1 - tpr) / n_members)``) and ``tpr_pvalue``: the
        one-sided binomial p-value of ``tpr > fpr`` over the members (chance flags a
        member with probability ``fpr``); all NaN when ``fpr`` times the non-member count
        is below 1.
    """
    from scipy import stats

    members, nonmembers = _scores_pair(scores_members, scores_nonmembers)
    tpr = tpr_at_fpr(members, nonmembers, fpr)
    if math.isnan(tpr):  # not even one non-member may be flagged at this FPR
        return {"tpr": math.nan, "tpr_se": math.nan, "tpr_pvalue": math.nan}
    flagged = int(round(tpr * members.size))
    return {
        "tpr": tpr,
        "tpr_se": math.sqrt(tpr * (1.0 - tpr) / members.size),
        "tpr_pvalue": float(stats.binomtest(flagged, members.size, fpr, alternative="greater").pvalue),
    }
