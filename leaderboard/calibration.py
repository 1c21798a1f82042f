"""How often the board's test separates equal entries, and how often it finds a real difference.

Pure simulation from a board's own cells (docs/protocol.md, "Calibration"), used by the
tests and by ``benchmarks/board_power.py``:

* an **A/A** check redraws one entry twice on independent seeds, each configuration's
  (utility, privacy) on a new seed drawn around its mean over the entry's seeds with its
  seed-to-seed standard deviations (clipped to [0, 1]), and counts how often
  :func:`leaderboard.stats.compare` separates the twins (its false-separation rate);
* an **A/B** check draws per-seed differences of a given true size, with the board's own
  pooled standard deviation or its own centred per-seed differences resampled, and counts
  how often the paired test separates them (its power).

Every decision is the board's own function; only the inputs are simulated.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from bench.core.result import Result
from leaderboard.boards import Board, build_leaderboard
from leaderboard.declare import declaration_from_entry
from leaderboard.pareto import hypervolume_2d_batch
from leaderboard.stats import compare, paired_comparison, paired_differences

__all__ = ["ab_power", "boards_of_entries", "entry_points", "false_separation_rate", "pooled_residuals",
           "twin_hypervolumes"]


def boards_of_entries(paths: Sequence[str | Path]) -> dict[str, Board]:
    """Returns the boards that entry files make, by benchmark, as the leaderboard builds them.

    For calibration only: nothing is verified or planned (``bench leaderboard`` does both),
    so the boards are those of the files as they stand.

    Args:
        paths: Entry files (``leaderboard/entries/*.json``).
    """
    rows, declarations = [], []
    for path in paths:
        entry = json.loads(Path(path).read_text(encoding="utf-8"))
        declarations.append(declaration_from_entry(entry))
        default = (entry.get("suite") or {}).get("overrides") or {}
        rows += [{**Result.from_dict(cell).to_dict(), "source": f"entry:{entry['name']}",
                  "run_id": str(cell.get("run_id", "")), "overrides": cell.get("overrides", default)}
                 for cell in entry["cells"]]
    return {board.key.benchmark: board for board in build_leaderboard(pd.DataFrame(rows), declarations).boards}


def entry_points(board: Board, name: str) -> dict[str, np.ndarray]:
    """Returns an entry's cells on a board as configuration -> array (seeds, 2) of (utility, privacy).

    Args:
        board: The board.
        name: The entry's name.
    """
    cells = board.cells[board.cells["entry"] == name].sort_values("seed")
    return {configuration: group[["utility", "privacy"]].to_numpy(dtype=float)
            for configuration, group in cells.groupby("configuration", sort=True)}


def twin_hypervolumes(points: Mapping[str, np.ndarray], seeds: int, repetitions: int,
                      rng: np.random.Generator) -> np.ndarray:
    """Draws an entry's per-seed hypervolume on new seeds from its configurations' seed-to-seed spread.

    Args:
        points: Configuration -> array (s, 2) of its (utility, privacy) on each of the
            entry's seeds (rows with a NaN, flagged cells, are left out).
        seeds: Seeds per simulated entry.
        repetitions: Simulated entries.
        rng: Random generator.

    Returns:
        Array (repetitions, seeds) of hypervolumes.
    """
    means, sds = [], []
    for values in points.values():
        values = np.asarray(values, dtype=float).reshape(-1, 2)
        values = values[np.isfinite(values).all(axis=1)]
        if len(values) == 0:
            continue
        means.append(values.mean(axis=0))
        sds.append(values.std(axis=0, ddof=1) if len(values) > 1 else np.zeros(2))
    if not means:
        return np.zeros((repetitions, seeds))
    mean, sd = np.array(means), np.array(sds)
    draws = rng.normal(mean, sd, size=(repetitions * seeds, *mean.shape))
    return hypervolume_2d_batch(np.clip(draws, 0.0, 1.0)).reshape(repetitions, seeds)


def false_separation_rate(points: Mapping[str, np.ndarray], seeds: int, repetitions: int,
                          rng: np.random.Generator, *, paired: bool = True) -> float:
    """Returns how often two twins of one entry, on independent seeds, are separated.

    Args:
        points: The entry's cells, as for :func:`twin_hypervolumes`.
        seeds: Seeds per twin.
        repetitions: Pairs of twins.
        rng: Random generator.
        paired: Compare seed by seed (both twins declare the same seed numbers, as a
            board's entries do) or, False, as entries on disjoint seeds (Welch).
    """
    first = twin_hypervolumes(points, seeds, repetitions, rng)
    second = twin_hypervolumes(points, seeds, repetitions, rng)
    offset = 0 if paired else seeds
    separated = 0
    for a, b in zip(first, second):
        comparison = compare(dict(enumerate(a)), {offset + i: v for i, v in enumerate(b)})
        separated += comparison.separated
    return separated / repetitions


def pooled_residuals(values: Mapping[str, Mapping[int, float]]) -> np.ndarray:
    """Returns every pair's per-seed differences minus their mean, scaled by sqrt(n / (n - 1)).

    The scale makes each residual's variance that of one per-seed difference, so that
    residuals resampled around a true difference have the board's own spread and shape.

    Args:
        values: Entry -> (seed -> hypervolume).
    """
    out = [r for d in paired_differences(values) for r in (d - d.mean()) * math.sqrt(len(d) / (len(d) - 1))]
    return np.asarray(out)


def ab_power(difference: float, seeds: int, repetitions: int, rng: np.random.Generator, *,
             sd: float | None = None, residuals: Sequence[float] | None = None) -> float:
    """Returns how often the paired test separates per-seed differences of a given true mean.

    Args:
        difference: True mean difference.
        seeds: Common seeds.
        repetitions: Simulated comparisons.
        rng: Random generator.
        sd: Normal per-seed differences with this standard deviation, or
        residuals: differences resampled from these (e.g. :func:`pooled_residuals`).

    Raises:
        ValueError: Neither or both of ``sd`` and ``residuals``.
    """
    if (sd is None) == (residuals is None):
        raise ValueError("give either sd or residuals")
    if sd is not None:
        noise = rng.normal(0.0, sd, size=(repetitions, seeds))
    else:
        noise = rng.choice(np.asarray(residuals, dtype=float), size=(repetitions, seeds), replace=True)
    d = difference + noise
    zeros = np.zeros(seeds)
    return sum(paired_comparison(row, zeros).separated for row in d) / repetitions
