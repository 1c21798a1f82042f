"""Metric-learning losses of person re-identification: batch-hard triplet and centroid triplet."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def pairwise_distances(x: torch.Tensor, y: torch.Tensor, squared: bool = False) -> torch.Tensor:
    """Returns Euclidean distances [M, N] between rows of ``x`` [M, D] and ``y`` [N, D].

    Args:
        x: First set of vectors.
        y: Second set of vectors.
        squared: Return squared distances.
    """
    d2 = (x.pow(2).sum(1, keepdim=True) + y.pow(2).sum(1)[None, :] - 2.0 * x @ y.t()).clamp_min(0.0)
    return d2 if squared else d2.clamp_min(1e-12).sqrt()


def batch_hard_triplet_loss(features: torch.Tensor, labels: torch.Tensor, margin: float | None = 0.3) -> torch.Tensor:
    """Batch-hard triplet loss (Hermans et al. 2017) on Euclidean distances.

    Each sample is an anchor; its positive is the farthest sample of its class and its
    negative the closest sample of another class in the batch. Anchors without a positive
    or without a negative are ignored.

    Args:
        features: Embeddings [N, D].
        labels: Class of each embedding [N].
        margin: Hinge margin; None uses the soft margin ``log(1 + exp(d_ap - d_an))``.

    Returns:
        The mean loss over the anchors (0 when no anchor has a triplet).
    """
    dist = pairwise_distances(features, features)
    same = labels[:, None] == labels[None, :]
    eye = torch.eye(len(labels), dtype=torch.bool, device=labels.device)
    positive = same & ~eye
    negative = ~same
    valid = positive.any(1) & negative.any(1)
    if not valid.any():
        return features.sum() * 0.0
    d_ap = dist.masked_fill(~positive, float("-inf")).amax(1)[valid]
    d_an = dist.masked_fill(~negative, float("inf")).amin(1)[valid]
    return _hinge(d_ap, d_an, margin)


def centroid_triplet_loss(
    features: torch.Tensor, labels: torch.Tensor, margin: float | None = 0.3, squared: bool = True
) -> torch.Tensor:
    """Centroid Triplet Loss, Eq. 4 of the cross-camera reID paper (Wieczorek et al. 2021).

    ``L = [||f(A) - c_P||^2 - ||f(A) - c_N||^2 + alpha]_+`` for every sample A of the
    batch. The positive centroid c_P is the mean of the other samples of A's class in the
    batch (leaving A out, as Centroid-reID's training code does, so that A is not pulled
    towards itself); the negative centroid c_N is the closest of the other classes'
    centroids (each the mean of all that class's samples in the batch). Samples whose
    class has no other sample in the batch, or batches of one class, contribute nothing.

    Args:
        features: Embeddings [N, D].
        labels: Class of each embedding [N].
        margin: alpha_c; None uses the soft margin.
        squared: Squared distances as in Eq. 4 (False: plain Euclidean distances).

    Returns:
        The mean loss over the anchors that have both centroids.
    """
    classes, inverse = torch.unique(labels, return_inverse=True)
    onehot = F.one_hot(inverse, len(classes)).to(features.dtype)
    counts = onehot.sum(0)
    sums = onehot.t() @ features
    centroids = sums / counts[:, None]
    own_count = counts[inverse]
    valid = own_count > 1
    if len(classes) < 2 or not valid.any():
        return features.sum() * 0.0
    leave_one_out = (sums[inverse] - features) / (own_count - 1).clamp_min(1)[:, None]
    d_ap = (features - leave_one_out).pow(2).sum(1)
    d_all = pairwise_distances(features, centroids, squared=True)
    d_an = d_all.masked_fill(onehot.bool(), float("inf")).amin(1)
    if not squared:
        d_ap, d_an = d_ap.clamp_min(1e-12).sqrt(), d_an.clamp_min(1e-12).sqrt()
    return _hinge(d_ap[valid], d_an[valid], margin)


def _hinge(d_ap: torch.Tensor, d_an: torch.Tensor, margin: float | None) -> torch.Tensor:
    if margin is None:
        return F.softplus(d_ap - d_an).mean()
    return F.relu(d_ap - d_an + margin).mean()
