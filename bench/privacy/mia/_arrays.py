"""Shared input checks of the membership maths."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

# --------------------------------------------------------------------------- helpers


def _as_float64(values: Any, name: str) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().numpy()
    array = np.asarray(values, dtype=np.float64)
    if np.isnan(array).any():
        raise ValueError(f"{name} contains NaN")
    return array


def _scores_pair(scores_members: Any, scores_nonmembers: Any) -> tuple[np.ndarray, np.ndarray]:
    members = _as_float64(scores_members, "scores_members").ravel()
    nonmembers = _as_float64(scores_nonmembers, "scores_nonmembers").ravel()
    if members.size == 0 or nonmembers.size == 0:
        raise ValueError("membership metrics need at least one member and one non-member score")
    return members, nonmembers


def _threshold_counts(members: np.ndarray, nonmembers: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Returns (thresholds, tp, fp) of "member iff score >= threshold" over every threshold.

    The thresholds are +inf (nobody flagged) followed by every distinct score in
    decreasing order; ``tp[i]`` and ``fp[i]`` count members and non-members flagged at
    ``thresholds[i]`` (int64). Tied scores are flagged together, so ties are never split.
    """
    scores = np.concatenate([members, nonmembers])
    is_member = np.concatenate([np.ones(members.size, np.int64), np.zeros(nonmembers.size, np.int64)])
    order = np.argsort(-scores, kind="stable")
    ordered = scores[order]
    last_of_group = np.flatnonzero(ordered[1:] != ordered[:-1])  # np.diff would split tied infinities
    ends = np.concatenate([last_of_group, [ordered.size - 1]])
    tp = np.cumsum(is_member[order])[ends]
    fp = ends + 1 - tp
    thresholds = np.concatenate([[np.inf], ordered[ends]])
    return thresholds, np.concatenate([[0], tp]), np.concatenate([[0], fp])


def _check_delta_confidence(delta: float, confidence: float) -> None:
    if not 0.0 <= delta < 1.0:
        raise ValueError(f"delta must be in [0, 1), got {delta!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")


