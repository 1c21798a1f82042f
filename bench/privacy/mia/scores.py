"""Membership scores from model outputs: loss threshold, RMIA offline, LiRA offline (higher = member)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from bench.privacy.mia._arrays import _as_float64

_PROB_EPS = 1e-12
"""Default clip of probabilities away from 0 and 1 before the logit scaling of LiRA."""

LIRA_PER_EXAMPLE_VARIANCE_MIN_MODELS = 64
"""Reference models from which LiRA estimates a variance per example rather than a global one."""


# --------------------------------------------------------------------------- scores


def loss_scores(logits: Any, labels: Any) -> np.ndarray:
    """Returns the loss-threshold membership score: minus the cross-entropy of each example.

    Computed in float64 from ``log_softmax``, so it is finite for any finite logits.

    Args:
        logits: Model outputs before softmax, [N, C] (tensor or array).
        labels: True class of each example, integers in [0, C), [N].

    Returns:
        float64 array [N], <= 0; higher means more likely a member.
    """
    logits_t = torch.as_tensor(logits).detach().to(device="cpu", dtype=torch.float64)
    labels_t = torch.as_tensor(labels).detach().to(device="cpu", dtype=torch.long)
    if logits_t.ndim != 2 or labels_t.shape != (logits_t.shape[0],):
        raise ValueError(f"need logits [N, C] and labels [N], got {tuple(logits_t.shape)} and {tuple(labels_t.shape)}")
    loss = torch.nn.functional.cross_entropy(logits_t, labels_t, reduction="none")
    return (-loss).numpy()


def label_probabilities(logits: Any, labels: Any) -> np.ndarray:
    """Returns the softmax probability of the true label, the input of :func:`rmia_scores`.

    Args:
        logits: Model outputs before softmax, [..., C].
        labels: True classes, [...].

    Returns:
        float64 array of the shape of ``labels``, in [0, 1].
    """
    logits_t = torch.as_tensor(logits).detach().to(device="cpu", dtype=torch.float64)
    labels_t = torch.as_tensor(labels).detach().to(device="cpu", dtype=torch.long)
    log_p = torch.log_softmax(logits_t, dim=-1).gather(-1, labels_t.unsqueeze(-1)).squeeze(-1)
    return log_p.exp().numpy()


def scaled_logit_confidence(logits: Any, labels: Any) -> np.ndarray:
    """Returns LiRA's logit-scaled confidence ``log(p / (1 - p))`` computed from the logits.

    ``p`` is the softmax probability of the true label ``y``; the value equals
    ``z_y - logsumexp_{j != y} z_j`` exactly, with no rounding of ``p`` to 1 (a float32
    softmax gives ``p = 1`` already at a margin of about 17, after which every member
    ties). Pass the result to :func:`lira_offline_scores` with ``scaled=True``.

    Args:
        logits: Model outputs before softmax, [..., C] with C >= 2.
        labels: True classes, [...].

    Returns:
        float64 array of the shape of ``labels``.
    """
    logits_t = torch.as_tensor(logits).detach().to(device="cpu", dtype=torch.float64)
    labels_t = torch.as_tensor(labels).detach().to(device="cpu", dtype=torch.long).unsqueeze(-1)
    if logits_t.shape[-1] < 2:
        raise ValueError("the logit-scaled confidence needs at least two classes")
    true = logits_t.gather(-1, labels_t).squeeze(-1)
    others = logits_t.scatter(-1, labels_t, float("-inf"))
    return (true - torch.logsumexp(others, dim=-1)).numpy()


def logit_scale(probabilities: Any, eps: float = _PROB_EPS) -> np.ndarray:
    """Returns ``log(p / (1 - p))`` with ``p`` clipped to ``[eps, 1 - eps]``.

    Args:
        probabilities: Probabilities in [0, 1] (any shape).
        eps: Clip distance from 0 and 1; the result lies in ``±log((1 - eps) / eps)``.

    Returns:
        float64 array of the input's shape, finite.
    """
    p = np.clip(_as_float64(probabilities, "probabilities"), eps, 1.0 - eps)
    return np.log(p) - np.log1p(-p)


def _reference_matrix(values: Any, rows: int, name: str) -> np.ndarray:
    array = _as_float64(values, name)
    if array.ndim == 1:
        array = array[:, None]
    if array.ndim != 2 or array.shape[0] != rows or array.shape[1] < 1:
        raise ValueError(f"{name} must be [{rows}, K] with K >= 1, got {array.shape}")
    return array


def rmia_scores(
    target_prob_x: Any,
    ref_probs_x: Any,
    target_prob_z: Any,
    ref_probs_z: Any,
    a: float = 0.3,
    gamma: float = 1.0,
) -> np.ndarray:
    """Returns RMIA offline membership scores (Zarifzadeh et al., ICML 2024).

    "Low-Cost High-Power Membership Inference Attacks". For each candidate ``x`` the
    likelihood ratio ``LR(x) = Pr(x | theta) / Pr(x)`` compares the target model's
    probability of the true label with its average over models trained without knowing
    whether ``x`` is in. Offline, every reference model is OUT for ``x``, and the
    average over IN and OUT models is approximated linearly:

        Pr(x) = ((1 + a) * mean_k Pr_OUT_k(x) + (1 - a)) / 2

    (``a = 1`` trusts the OUT mean as it is; smaller ``a`` assumes that training on ``x``
    would have raised its probability towards 1). The same ratio is formed for each
    population sample ``z`` (never trained on by any model, with the same
    approximation), and

        score(x) = #{z : LR(x) / LR(z) > gamma} / #z.

    ``a``: the authors tune it by attacking one reference model with the others and
    keeping the ``a`` of highest AUC (their ml_privacy_meter sweeps 0, 0.1, ..., 1 and
    defaults to 0.3); values around 0.2-0.3 suit CIFAR-10-sized models. ``gamma = 1`` is
    the offline default; larger values ask for a clearer win per ``z``.

    The count uses the sorted population ratios and a binary search per candidate
    (``LR(x) / LR(z) > gamma`` iff ``LR(z) < LR(x) / gamma``, both positive): the same
    count as the N x Z pairwise comparison, in O((N + Z) log Z) time and O(N + Z) memory.

    Args:
        target_prob_x: The target model's probability of the true label of each
            candidate, [N] in [0, 1].
        ref_probs_x: The same under K OUT reference models, [N, K] ([N] for K = 1).
        target_prob_z: The target model's probability of the true label of each
            population sample, [Z].
        ref_probs_z: The same under the reference models, [Z, K'] (any K' >= 1).
        a: Offline approximation coefficient in [0, 1].
        gamma: Ratio threshold (> 0).

    Returns:
        float64 array [N] in [0, 1]; higher means more likely a member.

    Raises:
        ValueError: Shapes that do not match, probabilities outside [0, 1], ``a``
            outside [0, 1], ``gamma`` not positive, or an empty population.
    """
    if not 0.0 <= a <= 1.0:
        raise ValueError(f"a must be in [0, 1], got {a!r}")
    if not gamma > 0.0:
        raise ValueError(f"gamma must be positive, got {gamma!r}")
    px = _as_float64(target_prob_x, "target_prob_x").ravel()
    pz = _as_float64(target_prob_z, "target_prob_z").ravel()
    if pz.size == 0:
        raise ValueError("RMIA needs at least one population sample")
    refs_x = _reference_matrix(ref_probs_x, px.size, "ref_probs_x")
    refs_z = _reference_matrix(ref_probs_z, pz.size, "ref_probs_z")
    for name, values in (("target_prob_x", px), ("target_prob_z", pz), ("ref_probs_x", refs_x),
                         ("ref_probs_z", refs_z)):
        if values.size and (values.min() < 0.0 or values.max() > 1.0):
            raise ValueError(f"{name} must hold probabilities in [0, 1]")

    def ratio(target: np.ndarray, refs: np.ndarray) -> np.ndarray:
        marginal = 0.5 * ((1.0 + a) * refs.mean(axis=1) + (1.0 - a))
        with np.errstate(divide="ignore", invalid="ignore"):
            out = target / marginal
        # a = 1 and a reference mean of 0: Pr(x) = 0; a positive target probability then
        # says "member" as strongly as possible, a zero one says nothing.
        return np.where(marginal > 0, out, np.where(target > 0, np.inf, 0.0))

    ratio_x = ratio(px, refs_x)
    ratio_z = np.sort(ratio(pz, refs_z))
    with np.errstate(invalid="ignore"):
        bound = ratio_x / gamma
    beaten = np.searchsorted(ratio_z, bound, side="left")
    return beaten.astype(np.float64) / pz.size


def lira_offline_scores(
    target_conf_x: Any,
    ref_confs_x: Any,
    *,
    scaled: bool = False,
    global_variance: bool | None = None,
    eps: float = _PROB_EPS,
    log: bool = False,
) -> np.ndarray:
    """Returns LiRA offline membership scores (Carlini et al., S&P 2022, Alg. 1 offline).

    "Membership Inference Attacks From First Principles". Each confidence ``p`` (the
    probability of the true label) is logit-scaled, ``phi = log(p / (1 - p))``, which
    makes the OUT distribution of an example across reference models close to Gaussian. With ``mu(x)`` the mean of ``phi`` over the OUT
    reference models, the score is the one-sided test

        score(x) = Phi((phi_target(x) - mu(x)) / sigma),

    the probability that an OUT model gives ``x`` a lower confidence than the target
    did. ``sigma`` is per example (the standard deviation over its reference models)
    when there are at least :data:`LIRA_PER_EXAMPLE_VARIANCE_MIN_MODELS` reference
    models, and otherwise global, as the paper recommends for few models: the pooled
    within-example variance ``sum_x sum_k (phi_k(x) - mu(x))^2 / (N (K - 1))``. (The
    authors' code takes ``np.std`` of all reference values, which also counts how
    ``mu(x)`` varies between examples and so gives a wider Gaussian.)

    Probabilities are clipped to ``[eps, 1 - eps]`` before the scaling, so 0 and 1 give
    finite values; but a float32 softmax already rounds ``p`` to 1 for confident
    examples, which then all tie. Prefer :func:`scaled_logit_confidence` on the logits
    and ``scaled=True``. ``Phi`` itself saturates at 1 for z above about 8.3; pass
    ``log=True`` (``log Phi``, the same order) to keep such examples ranked.

    Args:
        target_conf_x: The target model's confidence of each candidate, [N] (already
            logit-scaled when ``scaled``).
        ref_confs_x: The confidences under K >= 2 OUT reference models, [N, K].
        scaled: The inputs are ``phi`` values, not probabilities.
        global_variance: Force the global (True) or per-example (False) variance; None
            picks by the number of reference models.
        eps: Clip of probabilities away from 0 and 1 (unused when ``scaled``).
        log: Return ``log Phi(z)`` instead of ``Phi(z)``.

    Returns:
        float64 array [N], in [0, 1] (``(-inf, 0]`` when ``log``); higher means more
        likely a member.

    Raises:
        ValueError: Mismatched shapes or fewer than two reference models.
    """
    from scipy import stats

    target = _as_float64(target_conf_x, "target_conf_x").ravel()
    refs = _reference_matrix(ref_confs_x, target.size, "ref_confs_x")
    models = refs.shape[1]
    if models < 2:
        raise ValueError("LiRA needs at least two reference models to estimate a variance")
    if not scaled:
        target, refs = logit_scale(target, eps), logit_scale(refs, eps)
    mean = refs.mean(axis=1)
    per_example = ((refs - mean[:, None]) ** 2).sum(axis=1) / (models - 1)
    if global_variance is None:
        global_variance = models < LIRA_PER_EXAMPLE_VARIANCE_MIN_MODELS
    variance = np.full_like(per_example, per_example.mean()) if global_variance else per_example
    sigma = np.sqrt(np.maximum(variance, 1e-300))
    z = (target - mean) / sigma
    return stats.norm.logcdf(z) if log else stats.norm.cdf(z)


