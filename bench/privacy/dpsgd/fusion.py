"""The DP-ViT paper's adaptive weighted fusion of two models' predictions (Sec. 3.3, Eqs. 14-17)."""

from __future__ import annotations

import torch


def prediction_variance(probs: torch.Tensor) -> torch.Tensor:
    """Eqs. 14-15: the variance of each prediction vector over its classes (divisor v).

    Args:
        probs: Class probabilities [N, v].

    Returns:
        Variances [N].
    """
    return probs.var(dim=1, unbiased=False)


def fusion_weights(probs1: torch.Tensor, probs2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 16: q_i = N_i / (N_1 + N_2), the more peaked prediction weighing more.

    When both variances are zero (two uniform predictions) each weight is 0.5.

    Args:
        probs1: First model's probabilities [N, v].
        probs2: Second model's probabilities [N, v].

    Returns:
        Weights (q1, q2), each [N], summing to 1.
    """
    var1, var2 = prediction_variance(probs1), prediction_variance(probs2)
    total = var1 + var2
    q1 = torch.where(total > 0, var1 / torch.where(total > 0, total, 1.0), 0.5)
    return q1, 1.0 - q1


def fuse(probs1: torch.Tensor, probs2: torch.Tensor) -> torch.Tensor:
    """Eq. 17: the fused prediction B = q1 · b1 + q2 · b2 (still a probability vector).

    Args:
        probs1: First model's probabilities [N, v].
        probs2: Second model's probabilities [N, v].

    Returns:
        Fused probabilities [N, v].
    """
    q1, q2 = fusion_weights(probs1, probs2)
    return q1[:, None] * probs1 + q2[:, None] * probs2
