"""Attacks calibrated by reference models: LiRA online, RMIA with per-example OUT models, RMIA's ``a``.

The adversary trains K reference models, each on a random part of its own data; ``keep``
[N, K] says which of N examples each model trained on (IN) or not (OUT).

- :func:`reference_keep`: who trains on what. Online (every example IN for exactly half of
  the models, as Carlini et al.'s code draws it) or offline (an independent fair coin per
  model and example; the attacked candidates are then never IN).
- :func:`paired_keep`: the models in complementary pairs, each on a random half: every
  example IN for exactly half of the models and every model on exactly half of the
  examples (the membership adversary's draw: a pool of twice the target's training set
  gives each reference model as many records as the target).
- :func:`lira_online_scores`: LiRA online (Carlini et al., S&P 2022, Alg. 1): Gaussian fits
  of the logit-scaled confidence under IN and OUT models, likelihood ratio of the target's.
- :func:`lira_offline_out_scores`: LiRA offline with each example's own OUT models.
- :func:`rmia_out_scores`: RMIA (Zarifzadeh et al., ICML 2024) with each example's own OUT
  models (:func:`bench.privacy.mia.rmia_scores` with their mean).
- :func:`choose_rmia_a`: RMIA's offline factor ``a`` chosen on the adversary's own models,
  leave one reference model out: each in turn plays the target, the others its references,
  and the ``a`` of highest TPR at the scoring FPR (then AUC) over those games wins. The
  attacked model's members are never looked at.
- :func:`reference_games`: the same games for LiRA and RMIA (RMIA's ``a`` chosen on the
  other games, so neither attack is scored on the games that tuned it), and the choice
  between them: the attack the adversary would use, decided on its own models alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from bench.privacy.mia._arrays import _as_float64
from bench.privacy.mia.metrics import auc, tpr_at_fpr
from bench.privacy.mia.scores import LIRA_PER_EXAMPLE_VARIANCE_MIN_MODELS, rmia_scores

A_GRID = tuple(round(0.1 * i, 1) for i in range(11))
"""The values of RMIA's ``a`` tried (the authors' ml_privacy_meter sweeps the same)."""
LIRA_ONLINE_MIN_MODELS = 4
"""Online LiRA needs two IN and two OUT models per example for its variances."""
CALIBRATED = ("lira", "rmia")
"""The attacks :func:`reference_games` chooses between."""


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


def paired_keep(n: int, models: int, rng: np.random.Generator) -> np.ndarray:
    """Returns who trains on what in complementary pairs: bool [n, models].

    Models ``2j`` and ``2j + 1`` split a random permutation of the ``n`` examples: the
    first ``n // 2`` train model ``2j``, the rest model ``2j + 1``. So every example is IN
    for exactly ``models / 2`` models and every model trains on ``n // 2`` or ``n - n // 2``
    examples, and in a game that leaves one model out every example keeps at least one OUT
    model among the others (from 4 models on).

    Args:
        n: Examples in the adversary's pool.
        models: Reference models (even, at least 2).
        rng: The draw's generator.
    """
    if models < 2 or models % 2:
        raise ValueError(f"paired reference models must be even and at least 2, got {models}")
    keep = np.zeros((n, models), dtype=bool)
    for pair in range(models // 2):
        order = rng.permutation(n)
        keep[order[: n // 2], 2 * pair] = True
        keep[order[n // 2:], 2 * pair + 1] = True
    return keep


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

    target, refs, mask = _candidates_by_models(target_phi, ref_phi, keep, "keep")
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


def lira_offline_out_scores(target_phi: Any, ref_phi: Any, out: Any,
                            global_variance: bool | None = None) -> np.ndarray:
    """Returns LiRA offline scores with each candidate's own OUT models: ``log Phi((phi - mu_out) / sigma)``.

    :func:`bench.privacy.mia.lira_offline_scores` (``scaled=True, log=True``) where the
    reference models that trained on a candidate are left out of its fit: ``mu_out`` is the
    mean over the candidate's OUT models; the variance is per candidate from
    :data:`LIRA_PER_EXAMPLE_VARIANCE_MIN_MODELS` OUT models on, and below that pooled (the
    mean of the within-candidate variances of the candidates with at least two OUT models).
    With every model OUT for every candidate it equals the plain offline score.

    Args:
        target_phi: The attacked model's logit-scaled confidence of each candidate, [N].
        ref_phi: The reference models' ``phi``, [N, K].
        out: bool [N, K], True where the model did not train on the candidate (at least
            one per row, and at least two in some row for the pooled variance).
        global_variance: Force pooled (True) or per-candidate (False) variances; None picks
            by K.

    Returns:
        float64 [N]; higher means more likely a member.
    """
    from scipy import stats

    target, refs, mask = _candidates_by_models(target_phi, ref_phi, out, "out")
    count = mask.sum(axis=1)
    if (count == 0).any():
        raise ValueError("every candidate needs at least one OUT reference model")
    if global_variance is None:
        global_variance = refs.shape[1] < LIRA_PER_EXAMPLE_VARIANCE_MIN_MODELS
    mean = np.where(mask, refs, 0.0).sum(axis=1) / count
    spread = np.where(mask, (refs - mean[:, None]) ** 2, 0.0).sum(axis=1)
    several = count >= 2
    if global_variance:
        if not several.any():
            raise ValueError("the pooled variance needs a candidate with at least two OUT reference models")
        var = np.full_like(mean, (spread[several] / (count[several] - 1)).mean())
    else:
        if not several.all():
            raise ValueError("per-candidate variances need at least two OUT reference models per candidate")
        var = spread / (count - 1)
    return stats.norm.logcdf((target - mean) / np.sqrt(np.maximum(var, 1e-300)))


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


@dataclass
class Games:
    """LiRA and RMIA played on the adversary's own reference models, leave one out (:func:`reference_games`).

    Attributes:
        tpr: Attack -> mean TPR at the scoring FPR over the games (NaN when no game
            resolves it).
        auc: Attack -> mean AUC over the games.
        games: Attack -> games played (a game needs members and non-members with
            reference models to fit).
        a: RMIA's ``a`` chosen on all the games (the one the target is attacked with), or
            the fixed one.
        a_chosen: Whether ``a`` was chosen (False: fixed, or no usable game, then 0.3).
        chosen: The attack of higher mean TPR (then AUC; LiRA on a tie or when neither
            can be played).
        per_game: Attack -> (tpr, auc) of each game played, for the record.
    """

    tpr: dict[str, float]
    auc: dict[str, float]
    games: dict[str, int]
    a: float
    a_chosen: bool
    chosen: str
    per_game: dict[str, list[tuple[float, float]]] = field(default_factory=dict)


def _lira_game(phi: np.ndarray, keep: np.ndarray, j: int, online: bool) -> tuple[np.ndarray, np.ndarray] | None:
    """Model j attacked by LiRA with the other models; returns (scores, is_member) of the rows it can score."""
    others = [k for k in range(keep.shape[1]) if k != j]
    inside = keep[:, others]
    if online:
        rows = (inside.sum(axis=1) >= 2) & ((~inside).sum(axis=1) >= 2)
    else:
        rows = (~inside).any(axis=1)
    members = keep[rows, j]
    if members.all() or not members.any():
        return None
    if online:
        scores = lira_online_scores(phi[rows, j], phi[rows][:, others], inside[rows])
    else:
        out = ~inside[rows]
        if not (out.sum(axis=1) >= 2).any():
            return None
        scores = lira_offline_out_scores(phi[rows, j], phi[rows][:, others], out)
    return scores, members


def reference_games(phi: Any, probs: Any, keep: Any, probs_z: Any, fpr: float, online: bool,
                    gamma: float = 1.0, a: float | None = None, grid: Sequence[float] = A_GRID) -> Games:
    """Plays LiRA and RMIA on the reference models, leave one out, and chooses between them.

    Each reference model j in turn is the target: its members are the examples it trained
    on, its non-members the others; the remaining models are the references (LiRA online
    uses the rows with at least two IN and two OUT models among them, LiRA offline and RMIA
    the rows with at least one OUT model). RMIA's ``a`` for game j is the one of highest
    mean TPR (then AUC) over the other games, so that RMIA's score in a game never comes
    from the game that tuned it (a fixed ``a`` is used as it is); the ``a`` returned, for
    the target, is the best over all games. The attack of higher mean TPR over the games
    (AUC breaks ties) is chosen. The attacked model is never looked at, so the choice
    carries no winner's curse into the target's TPR.

    Args:
        phi: Every reference model's logit-scaled confidence of each example, [N, K].
        probs: Their probabilities of each example's label, [N, K].
        keep: bool [N, K], who trained on what.
        probs_z: The reference models' probabilities of the population samples, [Z, K].
        fpr: The scoring FPR.
        online: Play LiRA online (as the target is attacked) or offline.
        gamma: RMIA's ratio threshold.
        a: RMIA's fixed ``a``; None: chosen.
        grid: The values of ``a`` tried.
    """
    f = _as_float64(phi, "phi")
    p = _as_float64(probs, "probs")
    mask = np.asarray(keep, dtype=bool)
    pz = _as_float64(probs_z, "probs_z")
    models = mask.shape[1]
    lira: list[tuple[float, float]] = []
    for j in range(models):
        game = _lira_game(f, mask, j, online) if models >= 2 else None
        if game is not None:
            s, m = game
            lira.append((tpr_at_fpr(s[m], s[~m], fpr), auc(s[m], s[~m])))
    table: dict[float, list[tuple[float, float]]] = {}
    values = tuple(grid) if a is None else (a,)
    played: list[int] = []
    for j in range(models if models >= 2 else 0):
        others = [k for k in range(models) if k != j]
        out = ~mask[:, others]
        rows = out.any(axis=1)
        members = mask[rows, j]
        if members.all() or not members.any():
            continue
        played.append(j)
        for value in values:
            s = rmia_out_scores(p[rows, j], p[rows][:, others], out[rows], pz[:, j], pz[:, others], value, gamma)
            table.setdefault(value, []).append((tpr_at_fpr(s[members], s[~members], fpr), auc(s[members], s[~members])))

    def merit(results: list[tuple[float, float]]) -> tuple[float, float]:
        tprs = [t for t, _ in results if not math.isnan(t)]
        return (float(np.mean(tprs)) if tprs else 0.0, float(np.mean([u for _, u in results])))

    if not played:
        chosen_a, a_chosen, rmia = (a if a is not None else 0.3), False, []
    elif a is not None:
        chosen_a, a_chosen, rmia = a, False, table[a]
    else:
        chosen_a, a_chosen = max(values, key=lambda v: merit(table[v])), True
        rmia = []
        for g in range(len(played)):  # each game scored with the a the other games chose
            rest = [i for i in range(len(played)) if i != g] or [g]
            best = max(values, key=lambda v: merit([table[v][i] for i in rest]))
            rmia.append(table[best][g])
    per_game = {"lira": lira, "rmia": rmia}

    def mean_tpr(results: list[tuple[float, float]]) -> float:
        tprs = [t for t, _ in results if not math.isnan(t)]
        return float(np.mean(tprs)) if tprs else math.nan

    tpr = {name: mean_tpr(per_game[name]) for name in CALIBRATED}
    auc_ = {name: float(np.mean([u for _, u in per_game[name]])) if per_game[name] else math.nan
            for name in CALIBRATED}
    playable = [name for name in CALIBRATED if per_game[name]]
    chosen = max(playable, key=lambda name: merit(per_game[name])) if playable else "lira"
    return Games(tpr, auc_, {name: len(per_game[name]) for name in CALIBRATED}, float(chosen_a), a_chosen, chosen,
                 per_game)


def _candidates_by_models(target_phi: Any, ref_phi: Any, mask: Any,
                          name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The target's phi [N], the references' phi [N, K] and a bool mask [N, K] named ``name``, shapes checked."""
    target = _as_float64(target_phi, "target_phi").ravel()
    refs = _as_float64(ref_phi, "ref_phi")
    flags = np.asarray(mask, dtype=bool)
    if refs.shape != flags.shape or refs.ndim != 2 or refs.shape[0] != target.size:
        raise ValueError(f"need ref_phi and {name} [{target.size}, K], got {refs.shape} and {flags.shape}")
    return target, refs, flags
