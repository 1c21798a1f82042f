"""The leaderboard table: one row per (benchmark, mechanism), ranked by hypervolume."""

from __future__ import annotations

import json
import math
from typing import Any, Iterable

import numpy as np
import pandas as pd

from leaderboard.pareto import hypervolume_2d

__all__ = [
    "CELL_COLUMNS",
    "NO_CLAIM",
    "TABLE_COLUMNS",
    "cells_frame",
    "claim_label",
    "leaderboard_table",
    "params_label",
]

NO_CLAIM = "none"
EMPIRICAL_ONLY = "empirical only"
PRIVACY_THRESHOLDS = (0.5, 0.9)

CELL_COLUMNS = [
    "benchmark",
    "mechanism",
    "params",
    "params_label",
    "seed",
    "profile",
    "metric",
    "utility",
    "privacy",
    "epsilon",
    "delta",
    "unit",
    "claim_label",
    "source",
    "run_id",
]

TABLE_COLUMNS = [
    "benchmark",
    "rank",
    "mechanism",
    "claim_type",
    "hv_mean",
    "hv_std",
    "hv_min",
    "hv_max",
    "hv_pooled",
    "best_utility_p50",
    "best_utility_p90",
    "n_cells",
    "n_seeds",
    "profiles",
    "sources",
]


def _mapping(value: Any) -> dict[str, Any] | None:
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value.strip().startswith("{"):
        try:
            parsed = json.loads(value)
        except ValueError:
            return None
        return parsed if isinstance(parsed, dict) else None
    return None


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _text(value: Any, default: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return default
    return str(value)


def params_label(params: Any) -> str:
    """Formats mechanism parameters as ``k=v, k=v`` in key order.

    Args:
        params: A dict, a JSON object string, or anything else (shown as text).
    """
    mapping = _mapping(params)
    if mapping is None:
        return _text(params)
    parts = []
    for key in sorted(mapping, key=str):
        value = mapping[key]
        if not (value is None or isinstance(value, (str, int, float, bool))):
            value = json.dumps(value, sort_keys=True, default=str)
        parts.append(f"{key}={value}")
    return ", ".join(parts)


def claim_label(epsilon: float, delta: float, unit: str) -> str:
    """Formats a formal claim as ``eps=3 [unit]`` (with delta when it is not zero)."""
    if math.isnan(epsilon):
        return ""
    delta_part = f", delta={delta:g}" if delta and not math.isnan(delta) else ""
    return f"eps={epsilon:g}{delta_part} [{unit}]" if unit else f"eps={epsilon:g}{delta_part}"


def _utility(row: pd.Series) -> tuple[str, float]:
    metric = _text(row.get("primary_metric"))
    utility = _mapping(row.get("utility"))
    if utility is not None:
        return metric, _number(utility.get(metric))
    return metric, _number(row.get("utility"))


def cells_frame(df: pd.DataFrame) -> pd.DataFrame:
    """Normalises result rows into one flat row per cell.

    Args:
        df: Rows of ``Result.to_dict()`` (``task``, ``mechanism``, ``params``, ``seed``,
            ``profile``, ``utility``, ``primary_metric``, ``privacy_score``, ``claim``),
            optionally with ``source`` and ``run_id``. Dicts may also be JSON strings; a
            numeric ``utility`` column is taken as the primary metric itself.

    Returns:
        A frame with :data:`CELL_COLUMNS`: ``utility`` is the primary metric, ``privacy``
        the privacy score (NaN when missing), and ``epsilon``/``delta``/``unit`` the claim
        (NaN/empty without one).

    Raises:
        ValueError: Rows are given without a ``task`` or ``mechanism`` column.
    """
    if len(df) == 0:
        return pd.DataFrame(columns=CELL_COLUMNS)
    missing = {"task", "mechanism"} - set(df.columns)
    if missing:
        raise ValueError(f"results lack column(s) {sorted(missing)}")
    rows = []
    for _, row in df.iterrows():
        metric, utility = _utility(row)
        claim = _mapping(row.get("claim")) or {}
        epsilon = _number(claim.get("epsilon")) if claim else math.nan
        delta = _number(claim.get("delta", 0.0)) if claim else math.nan
        unit = _text(claim.get("unit")) if claim else ""
        rows.append(
            {
                "benchmark": _text(row["task"]),
                "mechanism": _text(row["mechanism"]),
                "params": _mapping(row.get("params")) or {},
                "params_label": params_label(row.get("params")),
                "seed": _number(row.get("seed")),
                "profile": _text(row.get("profile")),
                "metric": metric,
                "utility": utility,
                "privacy": _number(row.get("privacy_score")),
                "epsilon": epsilon,
                "delta": delta,
                "unit": unit,
                "claim_label": claim_label(epsilon, delta, unit),
                "source": _text(row.get("source"), "local"),
                "run_id": _text(row.get("run_id")),
            }
        )
    return pd.DataFrame(rows, columns=CELL_COLUMNS)


def _points(group: pd.DataFrame) -> np.ndarray:
    pts = group[["utility", "privacy"]].to_numpy(dtype=float)
    pts = pts[~np.isnan(pts).any(axis=1)]
    return np.clip(pts, 0.0, 1.0)


def _claim_type(group: pd.DataFrame) -> str:
    claimed = group[group["epsilon"].notna()]
    units = sorted({unit or "unnamed unit" for unit in claimed["unit"]})
    if units:
        return "; ".join(units)
    return EMPIRICAL_ONLY if group["privacy"].notna().any() else NO_CLAIM


def _best_utility(group: pd.DataFrame, threshold: float) -> float:
    ok = group[(group["privacy"] >= threshold) & group["utility"].notna()]
    return float(ok["utility"].max()) if len(ok) else math.nan


def _joined(values: Iterable[str]) -> str:
    return ", ".join(sorted({v for v in values if v}))


def _summary(benchmark: str, mechanism: str, group: pd.DataFrame) -> dict[str, Any]:
    per_seed = []
    for _, seed_group in group.groupby("seed", dropna=False, sort=True):
        pts = _points(seed_group)
        if len(pts):
            per_seed.append(hypervolume_2d(pts))
    hv = np.asarray(per_seed, dtype=float)
    pooled = _points(group)
    return {
        "benchmark": benchmark,
        "mechanism": mechanism,
        "claim_type": _claim_type(group),
        "hv_mean": float(hv.mean()) if len(hv) else math.nan,
        "hv_std": float(hv.std(ddof=1)) if len(hv) > 1 else math.nan,
        "hv_min": float(hv.min()) if len(hv) else math.nan,
        "hv_max": float(hv.max()) if len(hv) else math.nan,
        "hv_pooled": hypervolume_2d(pooled) if len(pooled) else math.nan,
        "best_utility_p50": _best_utility(group, PRIVACY_THRESHOLDS[0]),
        "best_utility_p90": _best_utility(group, PRIVACY_THRESHOLDS[1]),
        "n_cells": int(len(group)),
        "n_seeds": int(group["seed"].nunique(dropna=False)),
        "profiles": _joined(group["profile"]),
        "sources": _joined(group["source"]),
    }


def leaderboard_table(df: pd.DataFrame) -> pd.DataFrame:
    """Summarises results per benchmark (task) and mechanism and ranks the mechanisms.

    Each cell is a point (utility, privacy), both clipped to [0, 1]; cells without a
    utility or privacy score count in ``n_cells`` but are not points. The hypervolume of
    a mechanism's points with reference (0, 0) is computed per seed (``hv_mean``, sample
    ``hv_std`` (NaN for one seed), ``hv_min``, ``hv_max``) and over all seeds pooled
    (``hv_pooled``). Mechanisms are ranked within a benchmark by ``hv_mean``, higher
    first; equal means share a rank; mechanisms without points come last with no rank.

    Args:
        df: Result rows, as accepted by :func:`cells_frame`.

    Returns:
        A frame with :data:`TABLE_COLUMNS`, sorted by benchmark and rank. ``claim_type``
        is the claim unit(s), ``"empirical only"`` (privacy scores but no formal claim)
        or ``"none"``; ``best_utility_p50``/``best_utility_p90`` are the best utility
        among cells with privacy >= 0.5 / 0.9 (NaN when none).
    """
    cells = cells_frame(df)
    rows = [
        _summary(benchmark, mechanism, group)
        for (benchmark, mechanism), group in cells.groupby(["benchmark", "mechanism"], sort=True)
    ]
    table = pd.DataFrame(rows, columns=[c for c in TABLE_COLUMNS if c != "rank"])
    if table.empty:
        return pd.DataFrame(columns=TABLE_COLUMNS)
    rank = table.groupby("benchmark")["hv_mean"].rank(method="min", ascending=False)
    table.insert(1, "rank", rank.astype("Int64"))
    table = table.sort_values(
        ["benchmark", "hv_mean", "hv_pooled", "mechanism"],
        ascending=[True, False, False, True],
        na_position="last",
        kind="mergesort",
    )
    return table.reset_index(drop=True)[TABLE_COLUMNS]
