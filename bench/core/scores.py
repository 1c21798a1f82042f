"""Privacy scores: the attack advantage that survives a mechanism, and when it is defined.

Pure functions (no tensors, no state), as DESIGN.md's "Privacy score" section defines them:

    retained = (attack_on_release - chance) / (attack_on_clean - chance), clipped to [0, 1]
    privacy  = 1 - retained

The score only means something when the attack has a real advantage on clean images. An
attack whose clean accuracy is not significantly above its chance rate (a one-sided exact
binomial test at level ``ALPHA`` on the probes it used) cannot show that a mechanism
protects anything, so its score is *undefined* (None) and the cell is flagged
``attack too weak``; it never counts as perfect privacy.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping

ALPHA = 0.01
"""Significance level of the clean-advantage test."""

TOO_WEAK = "attack too weak"
"""The flag of an attack (or attack part) whose clean advantage is not significant."""

IMPRECISE = "imprecise"
"""The flag of a defined score whose 95% interval is wider than ``IMPRECISE_WIDTH``."""

IMPRECISE_WIDTH = 0.2
"""The widest 95% interval of a privacy score that is not flagged ``imprecise``."""

Z95 = 1.959963984540054
"""The two-sided 95% normal quantile."""


def binomial_sf(successes: int, trials: int, p: float) -> float:
    """Returns P[X >= successes] for X ~ Binomial(trials, p), exactly.

    Args:
        successes: Observed successes k (0 <= k <= trials).
        trials: Independent trials n.
        p: Success probability under the null hypothesis.
    """
    if successes <= 0:
        return 1.0
    if successes > trials:
        return 0.0
    from scipy.stats import binom

    return float(binom.sf(successes - 1, trials, p))


def clean_advantage_pvalue(clean: float, chance: float, trials: int) -> float:
    """Returns the one-sided exact binomial p-value of "clean accuracy > chance".

    Args:
        clean: The attack's accuracy on clean images, a fraction of ``trials``.
        chance: The chance rate (null success probability), in [0, 1].
        trials: How many independent predictions ``clean`` was measured on.
    """
    if trials <= 0:
        return 1.0
    successes = int(round(clean * trials))
    return binomial_sf(successes, trials, min(max(chance, 0.0), 1.0))


def is_significant(clean: float, chance: float, trials: int | None, alpha: float = ALPHA) -> bool:
    """Whether the attack's clean advantage over chance is significant at level ``alpha``.

    Without a trial count only the sign of the advantage can be checked; attacks report
    their probe counts so that the exact test runs.
    """
    if not clean > chance:
        return False
    if trials is None:
        return True
    return clean_advantage_pvalue(clean, chance, trials) < alpha


def privacy_score(value: float, clean: float, chance: float, trials: int | None = None,
                  alpha: float = ALPHA, pvalue: float | None = None) -> float | None:
    """Returns ``1 - clip((value - chance) / (clean - chance), 0, 1)``, or None when undefined.

    Args:
        value: The attack's primary metric on released images.
        clean: The same attack on clean images.
        chance: The metric of a guess that ignores the images.
        trials: Probes behind ``clean`` (for the significance test).
        alpha: Significance level.
        pvalue: The attack's own p-value of its clean advantage (an AUC's Mann-Whitney
            test); when given it replaces the binomial test on ``trials``.

    Returns:
        The privacy score in [0, 1]; None when the clean advantage over chance is not
        significant (the attack is too weak to measure any protection) or a value is NaN.
    """
    if any(not math.isfinite(x) for x in (value, clean, chance)):
        return None
    significant = clean > chance and pvalue < alpha if pvalue is not None else is_significant(clean, chance, trials, alpha)
    if not significant:
        return None
    retained = min(max((value - chance) / (clean - chance), 0.0), 1.0)
    return 1.0 - retained


def proportion_se(fraction: float, trials: int | None) -> float | None:
    """Returns the binomial standard error of a fraction of ``trials`` (Agresti-Coull, never 0).

    The Wald error ``sqrt(p (1 - p) / n)`` is 0 at p = 0 or 1, which would call a top-1 of
    40 / 40 exact; adding z^2 / 2 successes and failures (Agresti and Coull, 1998) keeps it
    honest there and equals the Wald error for large n.

    Args:
        fraction: Successes / trials, in [0, 1].
        trials: How many independent trials; None or 0: unknown (returns None).
    """
    if not trials or not math.isfinite(fraction):
        return None
    n = trials + Z95 ** 2
    p = (fraction * trials + Z95 ** 2 / 2) / n
    return math.sqrt(p * (1.0 - p) / n)


def score_se(value: float, clean: float, chance: float, value_se: float | None,
             clean_se: float | None) -> float | None:
    """Returns the delta-method standard error of ``1 - (value - chance) / (clean - chance)``.

    Through ``retained = (v - c) / (v_clean - c)``, with ``v`` and ``v_clean`` taken as
    independent (they are measured on the same probes and positively correlated, so this
    errs wide) and the chance rate ``c`` as known:
    ``se(retained)^2 = se_v^2 / (v_clean - c)^2 + (v - c)^2 se_clean^2 / (v_clean - c)^4``.
    It is the error of the unclipped score; the privacy score's ± everywhere.

    Returns:
        The standard error, or None when a standard error is unknown or the clean advantage is 0.
    """
    if value_se is None or clean_se is None or not clean > chance:
        return None
    span = clean - chance
    se = math.sqrt(value_se ** 2 / span ** 2 + (value - chance) ** 2 * clean_se ** 2 / span ** 4)
    return se if math.isfinite(se) else None


def score_interval(value: float, clean: float, chance: float, value_se: float | None,
                   clean_se: float | None) -> tuple[float, float] | None:
    """Returns the 95% interval of ``1 - (value - chance) / (clean - chance)``, cut to [0, 1].

    The unclipped score plus or minus 1.96 delta-method standard errors (:func:`score_se`),
    cut to [0, 1] (a clipping map is monotone, so the cut interval covers the clipped score as
    the unclipped one covers the unclipped score).

    Returns:
        (low, high), or None when a standard error is unknown or the clean advantage is 0.
    """
    se = score_se(value, clean, chance, value_se, clean_se)
    if se is None:
        return None
    score = 1.0 - (value - chance) / (clean - chance)
    return max(0.0, min(1.0, score - Z95 * se)), max(0.0, min(1.0, score + Z95 * se))


def imprecise_flag(interval: tuple[float, float] | None, width: float = IMPRECISE_WIDTH) -> str | None:
    """Returns the ``imprecise`` flag of a score whose 95% interval is wider than ``width``, else None."""
    if interval is None or interval[1] - interval[0] <= width:
        return None
    return f"{IMPRECISE} (95% interval {interval[0]:.2f}-{interval[1]:.2f} is wider than {width:g})"


def worst(scores: Iterable[float | None]) -> float | None:
    """Returns the lowest defined score (the strongest attack), or None when none is defined."""
    defined = [s for s in scores if s is not None]
    return min(defined) if defined else None


def undefined_flags(scores: Mapping[str, float | None]) -> dict[str, str]:
    """Returns name -> ``attack too weak`` for every undefined score."""
    return {name: TOO_WEAK for name, score in scores.items() if score is None}
