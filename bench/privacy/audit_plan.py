"""How many trials an audit needs before its verdict can be "passed".

An audit whose trials cannot show an epsilon above the claim cannot fail it, so "bound <=
claim" means nothing there. The audit is sized so that it would catch a modest
over-claim: :func:`trials_needed` is the fewest counted trials per input at which a
mechanism whose true epsilon is ``POWER_RATIO`` times the claim gives a bound above the
claim even when both its error counts come out 1.645 standard deviations against the
audit (each about 5% likely).

The model of that mechanism is the extreme-event test of a Laplace release: an event
that the second input produces with probability ``q = POWER_EVENT`` and the first with
``q e^(-POWER_RATIO epsilon)`` (false positives ``q e^(-r epsilon)``, false negatives
``1 - q``; its Kairouz bound is exactly ``r epsilon``). A one-value Laplace release has
q = 1/2; DP-Pix spreads a colour pixel's loss over its three channel means, and all three
land in their top tails together with probability (1/2)^3 = 1/8, the value used here (the
conservative choice: tests between those extremes need fewer trials). Each count is
taken ``POWER_Z`` standard deviations on its unfavourable side, and the
bound comes from :func:`bench.privacy.audit_maths.epsilon_lower_bound`: the same Clopper-Pearson
maths that the audit reports.

An audit with fewer counted trials than :func:`trials_needed` that does not refute the
claim is ``inconclusive``; one with at least as many is ``passed``; a bound above the
claim is ``failed`` at any trial count.
"""

from __future__ import annotations

import functools
import math

from bench.privacy.audit_maths import epsilon_lower_bound

POWER_RATIO = 1.25
"""The over-claim the planned trials are sized to catch: a true epsilon 1.25 x the claim."""

POWER_EVENT = 0.125
"""Probability of the modelled extreme event under the second input (three channel values at their top)."""

POWER_Z = 1.645
"""Standard deviations each modelled count is moved against the audit (about 95% per rate)."""

_LARGEST = 2**53
"""Beyond this many trials :func:`trials_needed` says infinity: no audit can run them."""


def _expected_bound(trials: int, epsilon: float, delta: float, confidence: float) -> float:
    """Returns the bound the modelled over-claiming mechanism gives at ``trials`` with its counts moved by POWER_Z."""
    q = POWER_EVENT
    fpr, tpr = q * math.exp(-POWER_RATIO * epsilon), q
    fp = trials * fpr + POWER_Z * math.sqrt(trials * fpr * (1.0 - fpr))
    fn = trials * (1.0 - tpr) + POWER_Z * math.sqrt(trials * tpr * (1.0 - tpr))
    fp, fn = min(trials, math.ceil(fp)), min(trials, math.ceil(fn))
    return float(epsilon_lower_bound(fp, fn, trials, delta, confidence))


@functools.lru_cache(maxsize=256)
def trials_needed(epsilon: float, delta: float = 0.0, confidence: float = 0.95) -> float:
    """Returns the fewest counted trials per input at which an audit of this claim can pass.

    Args:
        epsilon: The claimed epsilon (> 0, finite).
        delta: The claimed delta in [0, 1).
        confidence: Joint confidence of the audit's bound.

    Returns:
        The count as an integer-valued float; ``math.inf`` when it exceeds 2^53.

    Raises:
        ValueError: epsilon not positive and finite.
    """
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ValueError(f"epsilon must be positive and finite, got {epsilon!r}")
    high = 64
    while _expected_bound(high, epsilon, delta, confidence) <= epsilon:
        high *= 2
        if high > _LARGEST:
            return math.inf
    low = high // 2
    while high - low > 1:  # the modelled bound grows with the trials
        middle = (low + high) // 2
        if _expected_bound(middle, epsilon, delta, confidence) > epsilon:
            high = middle
        else:
            low = middle
    return float(high)


def planned_trials(epsilon: float, delta: float, confidence: float, cap: int, floor: int = 100) -> int:
    """Returns the counted trials per input an audit of a claim runs: :func:`trials_needed` within ``[floor, cap]``.

    Args:
        epsilon: The claimed epsilon.
        delta: The claimed delta.
        confidence: Joint confidence of the bound.
        cap: The budget: most trials per input the audit may run.
        floor: Fewest trials per input (the audit's minimum).
    """
    needed = trials_needed(epsilon, delta, confidence)
    return int(max(floor, min(cap, needed)))


def verdict(bound: float | None, claimed: float | None, trials: int, needed: float | None) -> str:
    """Returns ``"passed"``, ``"inconclusive"`` or ``"failed"``.

    ``failed``: the bound exceeds the claim. ``inconclusive``: it does not, but the trials
    were fewer than ``needed`` (the audit could not have caught a modest over-claim).
    ``passed``: neither. Without a claim there is nothing to refute: ``passed``.
    """
    if bound is None or claimed is None:
        return "passed"
    if bound > claimed:
        return "failed"
    if needed is None or trials < needed:
        return "inconclusive"
    return "passed"
