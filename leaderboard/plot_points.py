"""What a board's frontier plot shows: configuration points with error bars, frontiers, axis limits.

A point is one configuration of one entry: its utility is the mean over seeds with a 95%
interval (Student t over seeds; with one seed, the cell's own logged CI, as in
:mod:`leaderboard.report`), its privacy the mean of the defined scores with their
standard deviation over seeds and within-seed noise (:func:`privacy_spread`). The ranking
scores each seed's own frontier, so those are computed too (drawn faint behind the frontier
of the means).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from leaderboard.boards import Board
from leaderboard.exports import terminal_safe
from leaderboard.pareto import frontier
from leaderboard.report import _mean_ci

__all__ = ["MARGIN", "MIN_SPAN", "PlotPoint", "SeedFrontier", "claim_text", "configuration_points", "data_range",
           "entry_frontier", "fit_limits", "privacy_spread", "seed_frontiers"]

MARGIN = 0.06
"""Room left on each side of the data, as a fraction of the data's span."""

MIN_SPAN = 0.05
"""The smallest span of an axis, so that a single point still has a window around it."""


@dataclass(frozen=True)
class PlotPoint:
    """One configuration of one entry, averaged over its seeds.

    Attributes:
        index: Position in the plot (the ``point-<index>`` element).
        entry: The entry's name.
        entry_index: The entry's position in the board's standings (its colour and marker).
        configuration: The canonical configuration.
        params: Its parameters as ``k=v, k=v``.
        x: Mean utility over seeds.
        y: Mean privacy over the seeds where it is defined.
        x_ci: Half-width of the utility's 95% interval (NaN without one).
        y_sd: Standard deviation of a seed's privacy: over seeds, or with one seed its within-run
            error (:func:`privacy_spread`; NaN with one seed and no recorded noise).
        seeds: Seeds with a defined privacy score.
        label: ``ε=3 [unit]`` for a formal claim, else empty.
        on_frontier: Whether the point is on its entry's frontier of configuration means.
    """

    index: int
    entry: str
    entry_index: int
    configuration: str
    params: str
    x: float
    y: float
    x_ci: float
    y_sd: float
    seeds: int
    label: str
    on_frontier: bool = False


@dataclass(frozen=True)
class SeedFrontier:
    """The frontier of one entry's cells in one seed.

    Attributes:
        entry: The entry's name.
        entry_index: The entry's position in the board's standings.
        seed: The seed.
        points: Frontier points, shape (k, 2), ascending utility.
    """

    entry: str
    entry_index: int
    seed: int
    points: np.ndarray


def claim_text(epsilon: float, unit: str, withheld: str = "", backed: bool = True) -> str:
    """Returns the label of a claim, ``ε=3 [m-pixel]`` (4 significant digits), or ``""`` without one.

    Args:
        epsilon: The claimed epsilon (NaN for none).
        unit: The claim's unit (may be empty).
        withheld: The splits the claim is withheld for: the label then starts ``withheld``.
        backed: False for a nominal epsilon the code cannot back: the label then starts ``UNBACKED``.
    """
    if not math.isfinite(epsilon):
        return ""
    text = f"ε={epsilon:.4g} [{unit}]" if unit else f"ε={epsilon:.4g}"
    text = text if backed else f"UNBACKED {text}"
    return terminal_safe(f"withheld {text}" if withheld else text, 36)


def privacy_spread(privacy: np.ndarray, se: np.ndarray) -> float:
    """Returns the standard deviation of one seed's privacy score.

    With two or more seeds, the sample standard deviation over seeds: it already holds each
    seed's noise within its run, so that noise is not added again (issue 55). With one seed,
    the root mean square of the recorded within-run standard errors (``privacy_score_se``, the
    delta method's). NaN when neither is known.

    Args:
        privacy: The defined privacy scores, one per seed.
        se: Their within-run standard errors (NaN: not recorded).
    """
    if len(privacy) > 1:
        return float(privacy.std(ddof=1))
    known = se[np.isfinite(se)]
    return float(np.sqrt(np.mean(known**2))) if len(known) else math.nan


def _configuration(cells: pd.DataFrame) -> tuple[float, float, float, float, int] | None:
    per_seed = cells.groupby("seed", sort=True).agg(utility=("utility", "mean"), se=("utility_se", "mean"),
                                                    privacy=("privacy", "mean"), privacy_se=("privacy_se", "mean"))
    per_seed = per_seed[per_seed["utility"].notna()]
    scored = per_seed[per_seed["privacy"].notna()]
    if len(per_seed) == 0 or len(scored) == 0:
        return None
    x, x_ci = _mean_ci(per_seed["utility"].to_numpy(float), per_seed["se"].to_numpy(float))
    privacy = scored["privacy"].to_numpy(float)
    y_sd = privacy_spread(privacy, scored["privacy_se"].to_numpy(float))
    return x, float(privacy.mean()), x_ci, y_sd, len(privacy)


def configuration_points(board: Board) -> tuple[list[PlotPoint], list[dict[str, str]]]:
    """Returns the board's points, entry by entry in standing order, and the configurations left out.

    Args:
        board: The board.

    Returns:
        ``(points, omitted)``: ``omitted`` names each configuration without a point
        (``entry``, ``configuration``, ``params``, ``reason``): no privacy score in any seed.
    """
    points: list[PlotPoint] = []
    omitted: list[dict[str, str]] = []
    for entry_index, standing in enumerate(board.standings):
        cells = board.cells[board.cells["entry"] == standing.name]
        mine: list[PlotPoint] = []
        for configuration, group in cells.groupby("configuration", sort=True):
            params = str(group["params_label"].iloc[0]) or "defaults"
            stats = _configuration(group)
            if stats is None:
                omitted.append({"entry": standing.name, "configuration": configuration, "params": params,
                                "reason": "no privacy score in any seed"})
                continue
            x, y, x_ci, y_sd, seeds = stats
            label = claim_text(float(group["epsilon"].iloc[0]), str(group["unit"].iloc[0] or ""),
                               str(group["withheld"].iloc[0]) if "withheld" in group else "",
                               bool(group["backed"].iloc[0]) if "backed" in group else True)
            mine.append(PlotPoint(len(points) + len(mine), standing.name, entry_index, configuration, params,
                                  x, y, x_ci, y_sd, seeds, label))
        front = {tuple(p) for p in frontier(np.array([[p.x, p.y] for p in mine]).reshape(-1, 2))}
        points += [_with_frontier(p, (p.x, p.y) in front) for p in mine]
    return points, omitted


def _with_frontier(point: PlotPoint, on_frontier: bool) -> PlotPoint:
    return PlotPoint(**{**point.__dict__, "on_frontier": on_frontier})


def entry_frontier(points: list[PlotPoint], entry_index: int) -> np.ndarray:
    """Returns the frontier of one entry's configuration means, shape (k, 2), ascending utility.

    Args:
        points: The board's points (:func:`configuration_points`).
        entry_index: The entry's position in the standings.
    """
    mine = np.array([[p.x, p.y] for p in points if p.entry_index == entry_index]).reshape(-1, 2)
    return frontier(mine)


def seed_frontiers(board: Board) -> list[SeedFrontier]:
    """Returns each entry's frontier in each of its seeds (cells with a privacy score only).

    Args:
        board: The board.
    """
    out = []
    for entry_index, standing in enumerate(board.standings):
        cells = board.cells[board.cells["entry"] == standing.name]
        for seed, group in cells.groupby("seed", sort=True):
            pts = group[["utility", "privacy"]].to_numpy(dtype=float)
            pts = pts[np.isfinite(pts).all(axis=1)]
            if len(pts):
                out.append(SeedFrontier(standing.name, entry_index, int(seed), frontier(pts)))
    return out


def privacy_bar(p: "PlotPoint") -> tuple[float, float]:
    """Returns the privacy error bar's ends: mean ± :func:`privacy_spread`, kept inside the score's range [0, 1]."""
    sd = p.y_sd if math.isfinite(p.y_sd) else 0.0
    return max(0.0, p.y - sd), min(1.0, p.y + sd)


def data_range(points: list[PlotPoint], seeds: list[SeedFrontier]) -> tuple[list[float], list[float]] | None:
    """Returns the extent of the points with their error bars and of the per-seed frontiers.

    Args:
        points: The configuration points.
        seeds: The per-seed frontiers.

    Returns:
        ``([x_min, x_max], [y_min, y_max])``, or None without any data.
    """
    xs: list[float] = []
    ys: list[float] = []
    for p in points:
        dx = p.x_ci if math.isfinite(p.x_ci) else 0.0
        xs += [p.x - dx, p.x + dx]
        ys += list(privacy_bar(p))
    for s in seeds:
        xs += s.points[:, 0].tolist()
        ys += s.points[:, 1].tolist()
    if not xs:
        return None
    return [float(min(xs)), float(max(xs))], [float(min(ys)), float(max(ys))]


def _padded(lo: float, hi: float) -> tuple[float, float]:
    if hi - lo < MIN_SPAN:
        middle = (lo + hi) / 2
        lo, hi = middle - MIN_SPAN / 2, middle + MIN_SPAN / 2
    margin = MARGIN * (hi - lo)
    return lo - margin, hi + margin


def fit_limits(points: list[PlotPoint], seeds: list[SeedFrontier]) -> tuple[tuple[float, float], tuple[float, float]]:
    """Returns axis limits fitted to the points with their error bars and the per-seed frontiers.

    Each axis spans the data plus :data:`MARGIN` of its span on either side; a span below
    :data:`MIN_SPAN` is widened to it around its middle. Without any data: [0, 1] each.

    Args:
        points: The configuration points.
        seeds: The per-seed frontiers.

    Returns:
        ``((x_low, x_high), (y_low, y_high))``.
    """
    extent = data_range(points, seeds)
    if extent is None:
        return (0.0, 1.0), (0.0, 1.0)
    return _padded(*extent[0]), _padded(*extent[1])
