"""Pure maths of the empirical DP audit: Clopper-Pearson bounds and the epsilon they imply.

A mechanism is (epsilon, delta)-DP only if every test that tells two neighbouring inputs
apart from one output has false-positive and false-negative rates with

    FPR + e^epsilon FNR >= 1 - delta   and   FNR + e^epsilon FPR >= 1 - delta

(Kairouz et al. 2015, Thm. 2.1), so observed rates give

    epsilon >= max(log((1 - delta - FNR) / FPR), log((1 - delta - FPR) / FNR)).

The audit (Jagielski et al. 2020, Alg. 2; Nasr et al. 2021) replaces both rates by
one-sided Clopper-Pearson upper bounds. Both bounds must hold at once, so each is taken at
level ``alpha / 2`` (a union bound; Jagielski et al.'s code does the same with the upper
end of a two-sided interval at level alpha): the epsilon lower bound then holds with
probability at least ``1 - alpha``.

Every function is side-effect free and vectorised over NumPy arrays of counts.
"""

from __future__ import annotations

import math

import numpy as np

ArrayLike = int | float | np.ndarray


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")


def _check_delta(delta: float) -> None:
    if not 0.0 <= delta < 1.0:
        raise ValueError(f"delta must be in [0, 1), got {delta!r}")


def clopper_pearson_upper(successes: ArrayLike, trials: ArrayLike, confidence: float) -> np.ndarray:
    """Returns the one-sided Clopper-Pearson upper bound on a binomial rate.

    The bound p solves ``P[Binomial(n, p) <= k] = 1 - confidence``: it is the
    ``confidence`` quantile of Beta(k + 1, n - k), and 1 when k = n.

    Args:
        successes: Observed successes k, 0 <= k <= n (arrays broadcast).
        trials: Trials n >= 1.
        confidence: Probability that the true rate is at most the bound.

    Returns:
        float64 array (0-d for scalar input).

    Raises:
        ValueError: Counts outside 0 <= k <= n, n < 1, or confidence outside (0, 1).
    """
    from scipy import stats

    _check_confidence(confidence)
    k = np.asarray(successes, dtype=np.float64)
    n = np.asarray(trials, dtype=np.float64)
    if np.any(n < 1) or np.any(k < 0) or np.any(k > n):
        raise ValueError("Clopper-Pearson needs 0 <= successes <= trials and trials >= 1")
    full = k >= n
    upper = stats.beta.ppf(confidence, k + 1, np.where(full, 1.0, n - k))
    return np.where(full, 1.0, upper)


def epsilon_from_rates(fpr: ArrayLike, fnr: ArrayLike, delta: float = 0.0) -> np.ndarray:
    """Returns the smallest epsilon consistent with a test's rates at delta.

    ``max(0, log((1 - delta - FNR) / FPR), log((1 - delta - FPR) / FNR))``; a term
    whose numerator is not positive shows nothing and counts as 0, and a zero rate
    against a positive numerator gives infinity.

    Args:
        fpr: False-positive rate(s) in [0, 1].
        fnr: False-negative rate(s) in [0, 1].
        delta: The claim's delta in [0, 1).

    Returns:
        float64 array (0-d for scalar input), >= 0.
    """
    _check_delta(delta)
    fpr = np.asarray(fpr, dtype=np.float64)
    fnr = np.asarray(fnr, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        first = np.where(1.0 - delta - fnr > 0, np.log((1.0 - delta - fnr) / fpr), 0.0)
        second = np.where(1.0 - delta - fpr > 0, np.log((1.0 - delta - fpr) / fnr), 0.0)
    return np.maximum(0.0, np.maximum(first, second))


def epsilon_lower_bound(
    false_positives: ArrayLike,
    false_negatives: ArrayLike,
    trials: int,
    delta: float = 0.0,
    confidence: float = 0.95,
) -> np.ndarray:
    """Returns the epsilon lower bound that a test's error counts show at ``confidence``.

    Both rates are bounded above by one-sided Clopper-Pearson bounds at level
    ``(1 - confidence) / 2`` each, so that both hold at once with probability at least
    ``confidence``; then :func:`epsilon_from_rates`.

    Args:
        false_positives: Trials on the first input that the test called the second.
        false_negatives: Trials on the second input that the test called the first.
        trials: Trials per input (the same for both).
        delta: The claim's delta.
        confidence: Joint confidence of the bound.

    Returns:
        float64 array (0-d for scalar input), >= 0.
    """
    return epsilon_lower_bound_unequal(false_positives, trials, false_negatives, trials, delta, confidence)


def epsilon_lower_bound_unequal(
    false_positives: ArrayLike,
    first_trials: ArrayLike,
    false_negatives: ArrayLike,
    second_trials: ArrayLike,
    delta: float = 0.0,
    confidence: float = 0.95,
) -> np.ndarray:
    """Returns the epsilon lower bound of :func:`epsilon_lower_bound` with unequal trial counts.

    The false-positive rate is bounded from ``false_positives`` of ``first_trials`` and the
    false-negative rate from ``false_negatives`` of ``second_trials``, each one-sided
    Clopper-Pearson at ``1 - (1 - confidence) / 2`` (a membership test has as many trials
    on each side as it has non-members and members).

    Args:
        false_positives: Trials on the first input that the test called the second.
        first_trials: Trials on the first input (>= 1; arrays broadcast).
        false_negatives: Trials on the second input that the test called the first.
        second_trials: Trials on the second input (>= 1).
        delta: The claim's delta.
        confidence: Joint confidence of the bound.

    Returns:
        float64 array (0-d for scalar input), >= 0.
    """
    each = 1.0 - (1.0 - confidence) / 2.0
    fpr = clopper_pearson_upper(false_positives, first_trials, each)
    fnr = clopper_pearson_upper(false_negatives, second_trials, each)
    return epsilon_from_rates(fpr, fnr, delta)


def max_demonstrable_epsilon(trials: int, delta: float = 0.0, confidence: float = 0.95) -> float:
    """Returns the largest epsilon ``trials`` trials per input can show at all (no errors).

    With zero errors on both sides each rate's bound is ``p = 1 - (alpha/2)^(1/n)``
    (alpha = 1 - confidence), and the bound is ``log((1 - delta - p) / p)``.

    Args:
        trials: Trials per input n >= 1.
        delta: The claim's delta.
        confidence: Joint confidence of the bound.
    """
    return float(epsilon_lower_bound(0, 0, trials, delta, confidence))


def trials_to_demonstrate(epsilon: float, delta: float = 0.0, confidence: float = 0.95) -> float:
    """Returns the fewest trials per input whose error-free outcome shows ``epsilon``.

    Inverts :func:`max_demonstrable_epsilon`: zero errors give ``p = 1 - (alpha/2)^(1/n)``,
    which must not exceed ``(1 - delta) / (1 + e^epsilon)``.

    Args:
        epsilon: The epsilon to demonstrate (> 0).
        delta: The claim's delta.
        confidence: Joint confidence of the bound.

    Returns:
        The count as an integer-valued float; ``math.inf`` when it exceeds 2^53 (no
        audit can run that many trials).

    Raises:
        ValueError: epsilon not positive and finite.
    """
    _check_confidence(confidence)
    _check_delta(delta)
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ValueError(f"epsilon must be positive and finite, got {epsilon!r}")
    rate = (1.0 - delta) * math.exp(-epsilon) / (1.0 + math.exp(-epsilon))
    half_alpha = (1.0 - confidence) / 2.0
    if rate <= 0.0:
        return math.inf
    n = math.ceil(math.log(half_alpha) / math.log1p(-rate))
    if n > 2**53:
        return math.inf
    while max_demonstrable_epsilon(n, delta, confidence) < epsilon:  # float rounding at the ceiling
        n += 1
    return float(n)
