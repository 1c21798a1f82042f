"""Attacks calibrated by reference models: LiRA online, RMIA with per-example OUT models, RMIA's ``a``.

The adversary trains K reference models, each on a random part of its own data; ``keep``
[N, K] says which of N examples each model trained on (IN) or not (OUT).

- :func:`reference_keep`: who trains on what. Online (every example IN for exactly half of
  the models, as Carlini et al.'s code draws it) or offline (an independent fair coin per
  model and example; the attacked candidates are then never IN).
- :func:`lira_online_scores`: LiRA online (Carlini et al., S&P 2022, Alg. 1): Gaussian fits
  of the logit-scaled confidence under IN and OUT models, likelihood ratio of the target's.
- :func:`rmia_out_scores`: RMIA (Zarifzadeh et al., ICML 2024) with each example's own OUT
  models (:func:`bench.privacy.mia.rmia_scores` with their mean).
- :func:`choose_rmia_a`: RMIA's offline factor ``a`` chosen on the adversary's own models,
  leave one reference model out: each in turn plays the target, the others its references,
  and the ``a`` of highest TPR at the scoring FPR (then AUC) over those games wins. The
  attacked model's members are never looked at.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from bench.privacy.mia._arrays import _as_float64
from bench.privacy.mia.metrics import auc, tpr_at_fpr
from bench.privacy.mia.scores import LIRA_PER_EXAMPLE_VARIANCE_MIN_MODELS, rmia_scores

A_GRID = tuple(round(0.1 * i, 1) for i in range(11))
"""The values of RMIA's ``a`` tried (the authors' ml_privacy_meter sweeps the same)."""
LIRA_ONLINE_MIN_MODELS = 4
"""Online LiRA needs two IN and two OUT models per example for its variances."""


def reference_keep(n: int, models: int, online: bool, rng: np.random.Generator) -> np.ndarray:
    """Returns who trains on what: bool [n, models], True where a model trains on an example.

    Args:
        n: Examples in the adversary's pool.
        models: Reference models.
        online: Each example IN for exactly ``models // 2`` models (``models`` even); else
            an independent fair coin per model and example.
        rng: The draw's generator.
    """
    if online:
        if models < LIRA_ONLINE_MIN_MODELS or models % 2:
            raise ValueError(f"online reference models must be even and at least {LIRA_ONLINE_MIN_MODELS}, "
                             f"got {models}")
        return np.argsort(rng.random((n, models)), axis=1) < models // 2
    return rng.random((n, models)) < 0.5


def lira_online_scores(target_phi: Any, ref_phi: Any, keep: Any, global_variance: bool | None = None) -> np.ndarray:
    """Returns LiRA online scores: ``log N(phi; mu_in, s_in) - log N(phi; mu_out, s_out)``.

    ``phi`` is the logit-scaled confidence (:func:`bench.privacy.mia.scaled_logit_confidence`).
    ``mu_in`` / ``mu_out`` are each example's means over its IN / OUT reference models;
    the variances are per example from :data:`LIRA_PER_EXAMPLE_VARIANCE_MIN_MODELS` models
    on, and below that pooled over examples (the mean of the per-example variances), as
    the paper recommends for few models.

    Args:
        target_phi: The attacked model's ``phi`` of each candidate, [N].
        ref_phi: The reference models' ``phi``, [N, K].
        keep: bool [N, K], True where the model trained on the candidate; every row needs
            at least two IN and two OUT models.
        global_variance: Force pooled (True) or per-example (False) variances; None
            picks by K.

    Returns:
        float64 [N]; higher means more likely a member.
    """
    from scipy import stats

    target = _as_float64(target_phi, "target_phi").ravel()
    refs = _as_float64(ref_phi, "ref_phi")
    mask = np.asarray(keep, dtype=bool)
    if refs.shape != mask.shape or refs.ndim != 2 or refs.shape[0] != target.size:
        raise ValueError(f"need ref_phi and keep [{target.size}, K], got {refs.shape} and {mask.shape}")
    if global_variance is None:
        global_variance = refs.shape[1] < LIRA_PER_EXAMPLE_VARIANCE_MIN_MODELS

    def fit(side: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        count = side.sum(axis=1)
        if (count < 2).any():
            raise ValueError("online LiRA needs at least two IN and two OUT reference models per candidate")
        mean = np.where(side, refs, 0.0).sum(axis=1) / count
        var = np.where(side, (refs - mean[:, None]) ** 2, 0.0).sum(axis=1) / (count - 1)
        if global_variance:
            var = np.full_like(var, var.mean())
        return mean, np.sqrt(np.maximum(var, 1e-30))

    mu_in, sd_in = fit(mask)
    mu_out, sd_out = fit(~mask)
    return stats.norm.logpdf(target, mu_in, sd_in) - stats.norm.logpdf(target, mu_out, sd_out)


def rmia_out_scores(target_prob_x: Any, ref_probs_x: Any, out_x: Any, target_prob_z: Any, ref_probs_z: Any,
                    a: float, gamma: float = 1.0) -> np.ndarray:
    """Returns RMIA scores with each candidate's own OUT reference models.

    Pr_OUT(x) is the mean over the models that did not train on ``x``; the population
    samples ``z`` are OUT for every model. See :func:`bench.privacy.mia.rmia_scores`.

    Args:
        target_prob_x: The attacked model's probability of each candidate's label, [N].
        ref_probs_x: The reference models' probabilities, [N, K].
        out_x: bool [N, K], True where the model did not train on the candidate (at least
            one per row).
        target_prob_z: The attacked model's probabilities of the population samples, [Z].
        ref_probs_z: The reference models' probabilities of them, [Z, K'].
        a: RMIA's offline factor.
        gamma: RMIA's ratio threshold.
    """
    refs = _as_float64(ref_probs_x, "ref_probs_x")
    out = np.asarray(out_x, dtype=bool)
    if refs.shape != out.shape or refs.ndim != 2:
        raise ValueError(f"ref_probs_x {refs.shape} and out_x {out.shape} must be the same [N, K]")
    count = out.sum(axis=1)
    if (count == 0).any():
        raise ValueError("every candidate needs at least one OUT reference model")
    mean_out = np.where(out, refs, 0.0).sum(axis=1) / count
    return rmia_scores(target_prob_x, mean_out[:, None], target_prob_z, ref_probs_z, a=a, gamma=gamma)


def choose_rmia_a(probs: Any, keep: Any, probs_z: Any, fpr: float, gamma: float = 1.0,
                  grid: Sequence[float] = A_GRID) -> dict[str, float] | None:
    """Returns RMIA's ``a`` chosen by leave-one-reference-out on the adversary's own models.

    Each reference model j in turn is the target; its members are the pool examples it
    trained on, its non-members the others; the remaining models are the references
    (those OUT for an example; examples with none are left out of that game). The ``a``
    of highest mean TPR at ``fpr`` over the games wins (AUC breaks ties, and decides
    alone when no game has enough non-members to resolve ``fpr``).

    Args:
        probs: Every reference model's probability of each pool example's label, [N, K].
        keep: bool [N, K], who trained on what.
        probs_z: The reference models' probabilities of the population samples, [Z, K].
        fpr: The scoring FPR.
        gamma: RMIA's ratio threshold.
        grid: The values of ``a`` tried.

    Returns:
        ``a``, ``tpr`` (mean over games; NaN when unresolved) and ``auc`` of the winner,
        and ``games``; None with fewer than two reference models or no usable game.
    """
    p = _as_float64(probs, "probs")
    mask = np.asarray(keep, dtype=bool)
    pz = _as_float64(probs_z, "probs_z")
    models = p.shape[1]
    if models < 2:
        return None
    table = {a: ([], []) for a in grid}
    for j in range(models):
        others = [k for k in range(models) if k != j]
        out = ~mask[:, others]
        rows = out.any(axis=1)
        members = mask[rows, j]
        if members.all() or not members.any():
            continue
        for a in grid:
            s = rmia_out_scores(p[rows, j], p[rows][:, others], out[rows], pz[:, j], pz[:, others], a, gamma)
            table[a][0].append(tpr_at_fpr(s[members], s[~members], fpr))
            table[a][1].append(auc(s[members], s[~members]))
    if not table[grid[0]][1]:
        return None

    def merit(a: float) -> tuple[float, float]:
        tprs = [t for t in table[a][0] if not math.isnan(t)]
        return (float(np.mean(tprs)) if tprs else 0.0, float(np.mean(table[a][1])))

    best = max(grid, key=merit)
    tprs = [t for t in table[best][0] if not math.isnan(t)]
    return {"a": float(best), "tpr": float(np.mean(tprs)) if tprs else math.nan,
            "auc": float(np.mean(table[best][1])), "games": float(len(table[best][1]))}
