"""The leaderboard as tables: one row per entry on a board, one per exploration cell."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import pandas as pd

from leaderboard.boards import Board, Leaderboard, Standing
from leaderboard.cells import most_common, params_label
from leaderboard.protocol import settings_label

__all__ = [
    "BOARD_CELL_COLUMNS",
    "EXPLORATION_COLUMNS",
    "TABLE_COLUMNS",
    "RANK_LINE",
    "WorstGroup",
    "board_cells_table",
    "board_power_text",
    "claim_audit_label",
    "exploration_table",
    "hardware_mix",
    "hardware_note",
    "leaderboard_table",
    "membership_baseline_text",
    "places_text",
    "privacy_text",
    "rank_label",
    "worst_group",
]

TABLE_COLUMNS = [
    "board", "benchmark", "profile", "data", "settings", "precision",
    "rank", "tied", "entry", "mechanism", "claim_type", "audit",
    "hv_mean", "hv_low", "hv_high", "hv_std", "hv_min", "hv_max", "seed_places", "seeds", "declared_seeds",
    "configurations", "cells", "runs", "flagged", "worst_group_privacy", "worst_group", "status", "verification",
    "tied_with", "not_separated", "detectable", "reproduction", "notes", "suite", "source", "hardware",
]

BOARD_CELL_COLUMNS = [
    "entry", "params", "seed", "metric", "utility", "utility_se", "privacy", "privacy_se", "privacy_attack", "flag",
    "flag_detail",
    "claim", "audit",
    "runs", "source", "run_id", "hardware",
]

EXPLORATION_COLUMNS = [
    "benchmark", "profile", "data", "settings", "precision",
    "mechanism", "params", "seed", "split", "metric", "utility", "privacy",
    "flag", "claim", "reason", "source", "run_id",
]


RANK_LINE = ("Rank: 1 + the number of entries that a paired t-test over common seeds (two-sided, 5%) separates "
             "above it or above any entry with a higher mean, so a rank never improves as the mean falls; entries of "
             "one rank are tied; rows by rank, then mean.")
"""How ranks are read, in one line (every board page, Markdown and terminal board)."""

UNSEPARATED = "="
"""The rank label of every ranked entry on a board that separates none of them."""


def rank_label(standing: Standing, board: Board | None = None) -> str:
    """Returns ``1``, ``1 (tied)``, ``–`` (unranked), or ``=`` on a board that separates no pair.

    Args:
        standing: The entry.
        board: Its board; given, a board that cannot rank its entries shows :data:`UNSEPARATED`
            instead of a column of ``1 (tied)``.
    """
    if standing.rank is None:
        return "–"
    if board is not None and board.cannot_rank:
        return UNSEPARATED
    return f"{standing.rank} (tied)" if standing.tied else str(standing.rank)


def board_power_text(board: Board) -> str:
    """Says what a board can rank: its rank levels, or that it separates nothing, with its detectable difference.

    "" for a board with fewer than two ranked entries.
    """
    ranked = len(board.ranked)
    baseline = membership_baseline_text(board)
    if ranked < 2:
        return baseline
    if board.cannot_rank:
        text = (f"This board separates none of its {ranked} ranked entries (no pair differs at 5%), so it does not "
                f"rank them: rows are in order of mean and '{UNSEPARATED}' marks the shared place; "
                f"{board.power.text()}.")
    else:
        text = f"{board.levels} rank levels among {ranked} ranked entries; {board.power.text()}."
    return f"{text} {baseline}" if baseline else text


MEMBERSHIP_FPRS = (0.01, 0.001)
"""False-positive rates at which a board states the membership attacks' reach on the non-private model."""


def membership_baseline_text(board: Board) -> str:
    """Says how far membership inference gets on the non-private model of a board's cells ('' without it).

    The non-private model is trained on the clean images and shared by every cell of a seed,
    so its TPRs are averaged over the board's cells: the distance from chance that every
    entry's privacy score is measured against.
    """
    values: dict[tuple[str, float], list[float]] = {}
    for metrics in board.cells.get("membership_clean", pd.Series(dtype=object)):
        for attack in ("lira", "rmia"):
            for fpr in MEMBERSHIP_FPRS:
                value = (metrics if isinstance(metrics, dict) else {}).get(f"{attack}.tpr_at_fpr_{fpr:g}_clean")
                if value is not None:
                    values.setdefault((attack, fpr), []).append(float(value))
    if not values:
        return ""
    parts = []
    for attack in ("lira", "rmia"):
        shown = [f"{sum(v) / len(v):.3f} at {100 * fpr:g}% FPR" for fpr in MEMBERSHIP_FPRS
                 if (v := values.get((attack, fpr)))]
        if shown:
            parts.append(f"{attack.upper()} {', '.join(shown)}")
    chance = ", ".join(f"{fpr:g}" for fpr in MEMBERSHIP_FPRS)
    return (f"Membership inference on the non-private model (the reach every entry's privacy is measured against; "
            f"chance is the FPR: {chance}): {'; '.join(parts)}.")


def places_text(standing: Standing) -> str:
    """Returns an entry's place on each seed in seed order, ``1, 1, 2``, or ``–`` (unranked)."""
    return ", ".join(str(place) for _, place in standing.seed_places) or "–"


def tied_text(standing: Standing, board: Board, shown: Callable[[str], str] = str) -> str:
    """Returns the other entries of a ranked entry's rank: their names, or ``every other ranked entry (N)``.

    The short form stands for a list that would name every other ranked entry (three or more).

    Args:
        standing: The entry.
        board: Its board.
        shown: How a name is shown (the terminal truncates and escapes it).
    """
    others = sum(s.ranked for s in board.standings) - 1
    if others >= 3 and len(standing.tied_with) == others:
        return f"every other ranked entry ({others})"
    return ", ".join(shown(name) for name in standing.tied_with)


def claim_audit_label(standing: Standing) -> str:
    """Returns an entry's claim type with the verdict of its audit beside it: ``m-pixel (m=1) (audit passed)``."""
    return f"{standing.claim_type} ({standing.audit})" if standing.audit else standing.claim_type


def privacy_text(value: float, flag: str, digits: int = 4) -> str:
    """Returns the privacy score, or its flag (``attack too weak``) when it is undefined."""
    if isinstance(value, float) and math.isnan(value):
        return flag or "–"
    return f"{value:.{digits}f}"


@dataclass(frozen=True)
class WorstGroup:
    """An entry's worst-group privacy on a board.

    Attributes:
        privacy: Mean over the entry's cells of their worst group's privacy (NaN when no
            cell has one).
        group: The group most often worst (``attribute=value``; "" without any).
        times: In how many cells ``group`` is the worst.
        cells: How many cells have a worst group (the mean's count).
        total: The entry's cells on the board.
    """

    privacy: float
    group: str
    times: int
    cells: int
    total: int

    @property
    def title(self) -> str:
        """A one-line explanation: ``worst: age_group=young in 5 of 9 cells; mean over 9 of 9 cells``."""
        if not self.cells:
            return f"no cell of {self.total} has results by group"
        return (f"worst: {self.group} in {self.times} of {self.cells} cells; "
                f"mean over {self.cells} of {self.total} cells")


def worst_group(cells: pd.DataFrame) -> WorstGroup:
    """Summarises the worst-group privacy of one entry's (test-split) cells.

    Cells without a worst group (no results by group, or no defined privacy in any group)
    are left out of the mean.

    Args:
        cells: The entry's rows of ``Board.cells``.
    """
    if "worst_group_privacy" not in cells:
        return WorstGroup(math.nan, "", 0, 0, len(cells))
    defined = cells[cells["worst_group_privacy"].notna()]
    if defined.empty:
        return WorstGroup(math.nan, "", 0, 0, len(cells))
    group, times = most_common(defined["worst_group"])
    return WorstGroup(float(defined["worst_group_privacy"].astype(float).mean()), group, times, len(defined),
                      len(cells))


def hardware_mix(cells: pd.DataFrame) -> list[str]:
    """Returns every distinct hardware label (:func:`leaderboard.cells.hardware_label`) behind averaged cells."""
    if "hardware" not in cells:
        return []
    return sorted({label for joined in cells["hardware"] for label in str(joined).split("; ") if label})


def hardware_note(board: Board) -> str:
    """Says which kinds of hardware computed a board's cells where there are several, else "".

    Float sums round differently on another CPU model, thread count or GPU, so the same
    cell differs slightly between them (the README's main job: acc 0.7569 on an AMD EPYC
    and 0.7667 on an Intel Xeon); a board that mixes them says so.
    """
    kinds = hardware_mix(board.cells)
    if len(kinds) < 2:
        return ""
    return (f"Cells computed on {len(kinds)} kinds of hardware ({'; '.join(kinds)}): CPU models, thread counts "
            "and GPUs round float sums differently, so numbers differ slightly between them.")


def _identity(board: Board) -> dict[str, Any]:
    key = board.key
    return {"board": key.id, "benchmark": key.benchmark, "profile": key.profile, "data": key.data_label,
            "settings": settings_label(key.settings), "precision": key.precision}


def _standing_row(board: Board, s: Standing) -> dict[str, Any]:
    e = s.estimate
    volumes = list(s.hypervolumes.values())
    cells = board.cells[board.cells["entry"] == s.name]
    worst = worst_group(cells)
    return {
        **_identity(board),
        "rank": s.rank, "tied": s.tied, "entry": s.name, "mechanism": s.mechanism, "claim_type": s.claim_type,
        "audit": s.audit,
        "hv_mean": e.mean if e else math.nan, "hv_low": e.low if e else math.nan, "hv_high": e.high if e else math.nan,
        "hv_std": e.std if e else math.nan, "hv_min": min(volumes) if volumes else math.nan,
        "hv_max": max(volumes) if volumes else math.nan,
        "seed_places": " ".join(f"{seed}:{place}" for seed, place in s.seed_places), "seeds": len(s.complete_seeds),
        "declared_seeds": ",".join(map(str, s.declared_seeds)), "configurations": s.configurations, "cells": s.cells,
        "runs": s.runs, "flagged": s.flagged, "worst_group_privacy": worst.privacy, "worst_group": worst.group,
        "status": s.status, "verification": s.verification, "tied_with": ", ".join(s.tied_with),
        "not_separated": ", ".join(s.not_separated), "detectable": board.power.detectable,
        "reproduction": s.reproduction,
        "suite": s.suite, "source": s.source, "hardware": "; ".join(hardware_mix(cells)), "notes": "; ".join(s.notes),
    }


def leaderboard_table(leaderboard: Leaderboard) -> pd.DataFrame:
    """Returns one row per entry per board, boards in order, each board ranked first.

    Columns are :data:`TABLE_COLUMNS`: the board's identity (``board`` id, ``benchmark``,
    ``profile``, ``data``, ``settings``, ``precision``), the entry's ``rank`` (<NA> when unranked),
    ``tied`` (shares its rank), the mean hypervolume over complete seeds with its 95%
    interval (``hv_low``, ``hv_high``) and seed spread (``hv_std``, ``hv_min``,
    ``hv_max``), its place among the ranked entries on each seed (``seed_places``,
    ``seed:place`` pairs, "" when unranked), counts, ``flagged`` cells (privacy undefined), the mean over its cells
    of their worst group's privacy (``worst_group_privacy``, NaN without results by
    group) with the group most often worst (``worst_group``; see :func:`worst_group`),
    ``status`` (``ranked`` or why not), ``audit`` (the audit verdict of its claims, "" without
    one), ``verification`` (``verified`` or ``unverified: <why>``: an unverified entry file is
    never ranked), ``tied_with`` (the other entries of its rank), ``not_separated`` (entries of
    other ranks it is not separated from either), ``detectable`` (the board's minimum detectable
    hypervolume difference at 80% power), ``reproduction`` (how an entry file is reproduced, or
    why it is self-reported), ``hardware`` (what computed its cells, :func:`hardware_mix`) and ``notes`` (what its
    interval and claims rest on, ``Standing.notes`` joined with "; ").
    """
    rows = [_standing_row(board, s) for board in leaderboard.boards for s in board.standings]
    table = pd.DataFrame(rows, columns=TABLE_COLUMNS)
    table["rank"] = table["rank"].astype("Int64")
    return table


def board_cells_table(board: Board) -> pd.DataFrame:
    """Returns a board's averaged cells: one row per entry, configuration and seed.

    ``utility_se`` and ``privacy_se`` are standard errors within the cell (the privacy
    score's by the delta method), never 95% half-widths; ``privacy_attack`` names the
    adversary that set the privacy score.
    """
    cells = board.cells.sort_values(["entry", "params_label", "seed"], kind="mergesort")
    rows = [{
        "entry": c.entry, "params": c.params_label, "seed": c.seed, "metric": c.metric, "utility": c.utility,
        "utility_se": c.utility_se, "privacy": c.privacy, "privacy_se": getattr(c, "privacy_se", float("nan")),
        "privacy_attack": getattr(c, "privacy_attack", ""),
        "flag": c.flag, "flag_detail": c.flag_detail,
        "claim": c.claim_label, "audit": getattr(c, "audit", ""), "runs": c.runs, "source": c.source,
        "run_id": c.run_id,
        "hardware": getattr(c, "hardware", ""),
    } for c in cells.itertuples(index=False)]
    return pd.DataFrame(rows, columns=BOARD_CELL_COLUMNS)


def exploration_table(leaderboard: Leaderboard) -> pd.DataFrame:
    """Returns the cells that are on no board (one row per run) with why, in a stable order."""
    cells = leaderboard.exploration
    rows = [{
        "benchmark": c.benchmark, "profile": c.profile, "data": c.board_key.data_label,
        "settings": settings_label(c.settings), "precision": c.board_key.precision, "mechanism": c.mechanism,
        "params": params_label(c.params),
        "seed": c.seed, "split": c.split, "metric": c.metric, "utility": c.utility, "privacy": c.privacy,
        "flag": c.flag, "claim": c.claim_label, "reason": c.reason, "source": c.source, "run_id": c.run_id,
    } for c in cells.itertuples(index=False)]
    table = pd.DataFrame(rows, columns=EXPLORATION_COLUMNS)
    order = ["benchmark", "profile", "data", "settings", "precision", "mechanism", "params", "seed", "split", "run_id"]
    return table.sort_values(order, kind="mergesort").reset_index(drop=True)
