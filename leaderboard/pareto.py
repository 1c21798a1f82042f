"""Pareto dominance and hypervolume for privacy-utility frontiers.

Point ``a`` dominates point ``b`` when ``a`` is at least as good on every axis and strictly
better on at least one. Equal points do not dominate each other, so duplicates of a
non-dominated point are all non-dominated.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["frontier", "hypervolume_2d", "hypervolume_2d_batch", "non_dominated"]


def _as_points(points: object) -> np.ndarray:
    arr = np.asarray(points, dtype=float)
    if arr.size == 0:
        return arr.reshape(0, arr.shape[-1] if arr.ndim == 2 else 0)
    if arr.ndim != 2:
        raise ValueError(f"points must be a 2-D array of shape (n, d), got shape {arr.shape}")
    if np.isnan(arr).any():
        raise ValueError("points contain NaN; drop incomplete points first")
    return arr


def _signs(maximize: bool | Sequence[bool], dims: int) -> np.ndarray:
    if isinstance(maximize, (bool, np.bool_)):
        flags = [bool(maximize)] * dims
    else:
        flags = [bool(m) for m in maximize]
        if len(flags) != dims:
            raise ValueError(f"maximize has {len(flags)} entries for {dims}-D points")
    return np.where(np.asarray(flags, dtype=bool), 1.0, -1.0)


def _oriented(points: object, maximize: bool | Sequence[bool]) -> np.ndarray:
    """Returns the points flipped so that larger is better on every axis."""
    arr = _as_points(points)
    if len(arr) == 0:
        return arr
    return arr * _signs(maximize, arr.shape[1])


def _non_dominated_2d(pts: np.ndarray) -> np.ndarray:
    order = np.lexsort((-pts[:, 1], -pts[:, 0]))
    keep = np.zeros(len(pts), dtype=bool)
    best_y = -np.inf
    i = 0
    n = len(order)
    while i < n:
        x = pts[order[i], 0]
        group_top = pts[order[i], 1]
        j = i
        while j < n and pts[order[j], 0] == x:
            if pts[order[j], 1] == group_top and group_top > best_y:
                keep[order[j]] = True
            j += 1
        best_y = max(best_y, group_top)
        i = j
    return np.flatnonzero(keep)


def _non_dominated_nd(pts: np.ndarray) -> np.ndarray:
    keep = np.ones(len(pts), dtype=bool)
    for i, p in enumerate(pts):
        ge = np.all(pts >= p, axis=1)
        gt = np.any(pts > p, axis=1)
        if np.any(ge & gt):
            keep[i] = False
    return np.flatnonzero(keep)


def non_dominated(
    points: object, maximize: bool | Sequence[bool] = (True, True)
) -> np.ndarray:
    """Finds the points that no other point dominates.

    Two-dimensional input is solved by one sort and a sweep, O(n log n); other
    dimensions by pairwise comparison, O(n^2 d).

    Args:
        points: Array-like of shape (n, d); may be empty.
        maximize: Per axis, whether larger is better. A single bool applies to every axis;
            a sequence needs one entry per axis.

    Returns:
        Sorted integer indices (dtype intp) of the non-dominated points. Duplicates of a
        non-dominated point are all kept.

    Raises:
        ValueError: The points are not (n, d), contain NaN, or ``maximize`` has the wrong
            length.
    """
    pts = _oriented(points, maximize)
    if len(pts) == 0:
        return np.empty(0, dtype=np.intp)
    if pts.shape[1] == 2:
        return _non_dominated_2d(pts).astype(np.intp)
    return _non_dominated_nd(pts).astype(np.intp)


def frontier(points: object, maximize: bool | Sequence[bool] = (True, True)) -> np.ndarray:
    """Returns the distinct non-dominated points sorted along the first axis.

    Args:
        points: Array-like of shape (n, d); may be empty.
        maximize: As for :func:`non_dominated`.

    Returns:
        Array of shape (k, d), ascending in the first coordinate (ties by the next ones).
        For two maximised axes the second coordinate then descends.
    """
    arr = _as_points(points)
    if len(arr) == 0:
        return arr.copy()
    front = arr[non_dominated(arr, maximize)]
    return np.unique(front, axis=0)


def hypervolume_2d(
    points: object,
    reference: Sequence[float] = (0.0, 0.0),
    maximize: bool | Sequence[bool] = (True, True),
) -> float:
    """Computes the area dominated by a 2-D point set and bounded by a reference point.

    The area is that of the union of the boxes spanned by each point and the reference.
    A point that does not strictly improve on the reference in both coordinates spans no
    area and contributes nothing.

    Args:
        points: Array-like of shape (n, 2); may be empty.
        reference: The bounding point, e.g. ``(0, 0)`` for utility and privacy in [0, 1].
        maximize: As for :func:`non_dominated`.

    Returns:
        The area, 0.0 for an empty set.

    Raises:
        ValueError: The points are not (n, 2), or points or reference contain NaN.
    """
    arr = _as_points(points)
    if len(arr) == 0:
        return 0.0
    if arr.shape[1] != 2:
        raise ValueError(f"hypervolume_2d needs 2-D points, got {arr.shape[1]}-D")
    ref = np.asarray(reference, dtype=float).reshape(-1)
    if ref.shape != (2,) or np.isnan(ref).any():
        raise ValueError(f"reference must be two numbers, got {reference!r}")
    signs = _signs(maximize, 2)
    pts = arr * signs
    ref = ref * signs
    pts = pts[(pts[:, 0] > ref[0]) & (pts[:, 1] > ref[1])]
    if len(pts) == 0:
        return 0.0
    pts = pts[np.lexsort((-pts[:, 1], -pts[:, 0]))]
    area = 0.0
    level = ref[1]
    for x, y in pts:
        if y > level:
            area += (x - ref[0]) * (y - level)
            level = y
    return float(area)


def hypervolume_2d_batch(points: object) -> np.ndarray:
    """Computes the hypervolume of many 2-D point sets at once (both axes maximised, reference (0, 0)).

    Used by the leaderboard's bootstrap, which needs the hypervolume of thousands of
    resampled versions of one frontier; each row gives the same value as
    :func:`hypervolume_2d` on that row's points.

    Args:
        points: Array-like of shape (r, n, 2): r sets of n points each. NaN coordinates
            mark absent points (they contribute nothing).

    Returns:
        Array of shape (r,) with each set's area.

    Raises:
        ValueError: The points are not (r, n, 2).
    """
    arr = np.asarray(points, dtype=float)
    if arr.ndim != 3 or arr.shape[2] != 2:
        raise ValueError(f"points must have shape (r, n, 2), got {arr.shape}")
    if arr.shape[1] == 0:
        return np.zeros(arr.shape[0])
    x = np.nan_to_num(arr[:, :, 0], nan=0.0)
    y = np.nan_to_num(arr[:, :, 1], nan=0.0)
    absent = (x <= 0) | (y <= 0)
    x = np.where(absent, 0.0, x)
    y = np.where(absent, 0.0, y)
    order = np.argsort(-x, axis=1, kind="stable")
    xs = np.take_along_axis(x, order, axis=1)
    ys = np.take_along_axis(y, order, axis=1)
    # Sweeping from the largest utility down, a point adds the strip between its privacy
    # and the best privacy seen so far (the level), times its utility.
    level = np.maximum.accumulate(ys, axis=1)
    previous = np.concatenate([np.zeros((len(ys), 1)), level[:, :-1]], axis=1)
    return (xs * np.clip(ys - previous, 0.0, None)).sum(axis=1)
