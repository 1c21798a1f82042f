"""One-run privacy audit with random canaries (Steinke, Nasr & Jagielski, NeurIPS 2023).

"Privacy Auditing with One (1) Training Run". ``m`` canaries are each included in the
training set by an independent fair coin, the model is trained once, the canaries are
ranked by a membership score, and the auditor guesses "in" for the ``k+`` highest and
"out" for the ``k-`` lowest (abstaining on the rest). With ``r = k+ + k-`` guesses of which
``v`` are right, their Theorem 3.1 bounds, for any (epsilon, delta)-DP training,

    P[W >= v] <= f(v) + 2 m delta * max_{i = 1..v} (f(v - i) - f(v)) / i,
    f(v) = P[Binomial(r, e^eps / (1 + e^eps)) >= v]

(their Algorithm 2 computes it with exact binomial tails, as :func:`tail_bound` does). A
training run whose observed ``v`` makes the right side at most ``beta`` refutes
(epsilon, delta)-DP at confidence ``1 - beta``; the largest epsilon so refuted is the
lower bound (:func:`epsilon_lower_bound`). Even a perfect guesser (``v = r = m``) cannot
refute more than :func:`epsilon_ceiling` for ``m`` canaries: a bound below a claim says
nothing unless that ceiling is above the claim.

Pure maths: NumPy arrays and floats in, floats out.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

EPSILON_MAX = 60.0
"""Largest epsilon the search considers (beyond it float64 cannot tell e^eps/(1+e^eps) from 1)."""
GRID_STEP = 0.25
"""Step of the scan over epsilon before the bisection refines the last crossing (a coarser scan
can only miss a refuted epsilon, never report one that is not: the bound stays valid)."""
GUESS_FRACTIONS = (0.05, 0.1, 0.25, 0.5)
"""Default guess counts ``k+ = k- = fraction * m``; the confidence is split over them (Bonferroni)."""


def tail_bound(epsilon: Any, delta: float, m: int, r: int, v: int) -> np.ndarray:
    """Returns Theorem 3.1's bound on P[W >= v] for (epsilon, delta)-DP training (vectorised in epsilon).

    Args:
        epsilon: One epsilon or an array of them (>= 0).
        delta: The claim's delta in [0, 1).
        m: Number of canaries (the theorem's delta term scales with it).
        r: Number of guesses made (0 <= r <= m).
        v: Number of correct guesses (0 <= v <= r).

    Returns:
        float64 array of epsilon's shape, clipped to [0, 1].
    """
    from scipy import special, stats

    if not (0 <= v <= r <= m):
        raise ValueError(f"need 0 <= v <= r <= m, got v={v}, r={r}, m={m}")
    if not 0.0 <= delta < 1.0:
        raise ValueError(f"delta must be in [0, 1), got {delta!r}")
    eps = np.atleast_1d(np.asarray(epsilon, dtype=np.float64))
    q = 1.0 / (1.0 + np.exp(-eps))  # e^eps / (1 + e^eps), stable
    f_v = special.bdtrc(v - 1, r, q) if v > 0 else np.ones_like(q)  # P[Binomial(r, q) > v - 1]
    if delta > 0.0 and v > 0:
        below = np.arange(v - 1, -1, -1)  # v-1, v-2, ..., 0: f(v - i) - f(v) = sum_{j<=i} P[W~ = v - j]
        pmf = stats.binom.pmf(below[None, :], r, q[:, None])
        alpha = (np.cumsum(pmf, axis=1) / np.arange(1, v + 1)[None, :]).max(axis=1)
        f_v = f_v + 2.0 * m * delta * alpha
    return np.clip(f_v, 0.0, 1.0).reshape(np.shape(epsilon))


def epsilon_lower_bound(m: int, r: int, v: int, delta: float, beta: float = 0.05) -> float:
    """Returns the largest epsilon that ``v`` correct guesses of ``r`` refute at confidence ``1 - beta``.

    (epsilon, delta)-DP implies (epsilon', delta)-DP for every epsilon' >= epsilon, so every
    epsilon below one whose :func:`tail_bound` is at most ``beta`` is refuted too: the bound
    is the largest such epsilon. It is found by a scan of step :data:`GRID_STEP` (the
    theorem's bound need not be monotone in epsilon when delta > 0) and a bisection of
    the last crossing to 1e-6.

    Args:
        m: Number of canaries.
        r: Guesses made.
        v: Correct guesses.
        delta: The claim's delta.
        beta: Significance (1 - confidence) of the bound.

    Returns:
        The bound, >= 0 (0 when not even epsilon = 0 is refuted).
    """
    if not 0.0 < beta < 1.0:
        raise ValueError(f"beta must be in (0, 1), got {beta!r}")
    if r == 0 or v == 0:
        return 0.0
    grid = np.arange(0.0, EPSILON_MAX + GRID_STEP, GRID_STEP)
    refuted = np.flatnonzero(tail_bound(grid, delta, m, r, v) <= beta)
    if refuted.size == 0:
        return 0.0
    last = int(refuted[-1])
    if last == grid.size - 1:
        return float(grid[-1])
    low, high = float(grid[last]), float(grid[last + 1])
    while high - low > 1e-6:
        middle = 0.5 * (low + high)
        if tail_bound(middle, delta, m, r, v) <= beta:
            low = middle
        else:
            high = middle
    return low


def epsilon_ceiling(m: int, r: int, delta: float, beta: float = 0.05) -> float:
    """Returns the bound of a perfect guesser: ``r`` guesses, all correct, among ``m`` canaries."""
    return epsilon_lower_bound(m, r, r, delta, beta)


def guess_counts(m: int, fractions: Sequence[float] = GUESS_FRACTIONS) -> list[int]:
    """Returns the distinct guess counts ``k`` (each side) of the fractions of ``m``, at least 1 and at most m // 2."""
    return sorted({min(max(1, int(round(f * m))), m // 2) for f in fractions} - {0})


def count_correct(scores: Any, included: Any, k: int) -> int:
    """Returns how many of the ``k`` highest ("in") and ``k`` lowest ("out") canaries are guessed right.

    Ties are broken by the canary's index (a fixed order that cannot see the coins).

    Args:
        scores: Membership score of each canary, [m] (higher: more likely included).
        included: The coins, bool [m].
        k: Guesses on each side (2k <= m).
    """
    values = np.asarray(scores, dtype=np.float64).ravel()
    coins = np.asarray(included, dtype=bool).ravel()
    if values.shape != coins.shape:
        raise ValueError(f"scores {values.shape} and coins {coins.shape} differ")
    if not 0 <= 2 * k <= values.size:
        raise ValueError(f"2k must be in [0, m], got k={k}, m={values.size}")
    if np.isnan(values).any():
        raise ValueError("scores contain NaN")
    order = np.argsort(-values, kind="stable")
    return int(coins[order[:k]].sum() + (~coins[order[values.size - k:]]).sum()) if k else 0


def one_run_audit(scores: Any, included: Any, delta: float, beta: float = 0.05,
                  fractions: Sequence[float] = GUESS_FRACTIONS) -> dict[str, float]:
    """Returns the one-run audit's epsilon lower bound and its ceiling for these canaries.

    The guess counts are fixed by ``fractions`` before any score is seen, and the
    confidence is split over them (Bonferroni: each at ``beta / len(counts)``), so the
    maximum over them is a valid bound at ``1 - beta``. The ceiling is the largest bound
    a perfect guesser (one that ranks every included canary above every excluded one)
    reaches on this run's coins with the same counts and split.

    Args:
        scores: Membership score of each canary, [m].
        included: Whether each canary was in the training set (the coins), [m].
        delta: The training claim's delta.
        beta: Significance of the bound.
        fractions: Guess counts per side as fractions of ``m``.

    Returns:
        ``epsilon_lower_bound``, ``epsilon_ceiling``, ``canaries`` (m), ``included``,
        ``guesses`` and ``correct`` of the count that gave the bound.
    """
    coins = np.asarray(included, dtype=bool).ravel()
    m = coins.size
    counts = guess_counts(m, fractions)
    if not counts:
        raise ValueError("the one-run audit needs at least 2 canaries")
    each = beta / len(counts)
    inside = int(coins.sum())
    best, ceiling = None, 0.0
    for k in counts:
        correct = count_correct(scores, coins, k)
        bound = epsilon_lower_bound(m, 2 * k, correct, delta, each)
        perfect = min(k, inside) + min(k, m - inside)  # what a guesser who knows the coins gets right
        ceiling = max(ceiling, epsilon_lower_bound(m, 2 * k, perfect, delta, each))
        if best is None or bound > best["epsilon_lower_bound"]:
            best = {"epsilon_lower_bound": bound, "guesses": 2 * k, "correct": correct}
    return {"epsilon_lower_bound": float(best["epsilon_lower_bound"]), "epsilon_ceiling": float(ceiling),
            "canaries": float(m), "included": float(inside), "guesses": float(best["guesses"]),
            "correct": float(best["correct"])}

