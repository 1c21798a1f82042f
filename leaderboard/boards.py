"""Boards: declared entries ranked like for like; everything else to the exploration view.

The rules are docs/protocol.md's. In short: rows are split by :class:`BoardKey`; a row
counts on a board only as a cell of a declared entry (matched by cell key) on the test
split; re-runs of one cell are averaged; an entry's score is the mean over its declared,
complete seeds of the hypervolume of that seed's frontier; entries are ranked by paired
t-tests over common seeds and share a rank unless separated at 95%; each board states the
hypervolume difference it can detect (:func:`leaderboard.stats.detection_power`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from leaderboard.cells import REFUTED, TUNING_NOT_IN_EPSILON, average_reruns, cells_frame
from leaderboard.declare import Declaration, DeclaredCell
from leaderboard.pareto import hypervolume_2d
from leaderboard.protocol import MIN_SEEDS, TEST_SPLIT, BoardKey
from leaderboard.stats import (
    Comparison,
    DetectionPower,
    Estimate,
    compare,
    competition_ranks,
    detection_power,
    mean_estimate,
)
from leaderboard.verification import VERIFIED, audit_text

__all__ = ["Board", "Leaderboard", "Standing", "build_leaderboard", "RANKED", "TUNING", "UNBACKED",
           "UNDECLARED", "WITHHELD"]

RANKED = "ranked"
TUNING = "tuning cell (validation split)"
UNDECLARED = "not a declared configuration"
NOT_IN_ENTRY = "not declared by its entry"
NO_CLAIM = "none"
EMPIRICAL_ONLY = "empirical only"
WITHHELD = "WITHHELD"
"""Marks a claim type whose claim does not cover a released split (never a formal claim)."""
UNBACKED = "UNBACKED"
"""Marks a claim type whose nominal epsilon the code cannot back (never a formal claim)."""
HV_RANGE_TEXT = "[0, 1]"


@dataclass(frozen=True)
class Standing:
    """One declared entry on one board.

    Attributes:
        name: The entry's name.
        source: ``local`` or ``entry:<name>``.
        mechanism: Registered mechanism name.
        suite: The suite its configurations come from.
        claim_type: Claim unit(s), ``empirical only`` or ``none``.
        configurations: Configurations it declares on this benchmark.
        declared_seeds: Its declared seeds.
        complete_seeds: Declared seeds with every configuration present on this board.
        hypervolumes: Seed -> hypervolume of that seed's frontier (complete seeds).
        estimate: Mean over complete seeds with interval and spread (None without any).
        cells: Averaged cells present.
        runs: Runs averaged into them.
        flagged: Cells whose privacy score is undefined (never frontier points).
        status: ``ranked``, or why not.
        rank: Competition rank (ranked entries only).
        tied: Whether another ranked entry has the same rank (shown as ``tied``).
        tied_with: The other ranked entries of the same rank (empty exactly when not ``tied``).
        not_separated: Ranked entries of other ranks that it is not separated from either (when
            separations are not transitive: A beats C, neither beats B).
        seed_places: ``(seed, place)`` pairs in seed order (ranked entries only): on each seed, 1 + the
            ranked entries with a larger hypervolume on that seed. Whether the ranking holds seed by
            seed, next to the rank, which rests on the mean and the paired comparisons.
        audit: The audit verdict of its claims (:func:`leaderboard.verification.audit_text`;
            "" without a formal claim).
        verification: ``verified``, or ``unverified: <why>`` (an entry file the board cannot
            verify: never ranked).
        reproduction: How an entry file is reproduced (``reproduced: ...``, ``project baseline ...``)
            or why it is self-reported (never ranked); "" for a suite's local runs.
        notes: What its interval and claims rest on where a reader could take them for more:
            an interval clipped to the hypervolume's range, a withheld or UNBACKED claim, DP-SGD
            settings tuned on the private records.
    """

    name: str
    source: str
    mechanism: str
    suite: str
    claim_type: str
    configurations: int
    declared_seeds: tuple[int, ...]
    complete_seeds: tuple[int, ...]
    hypervolumes: Mapping[int, float]
    estimate: Estimate | None
    cells: int
    runs: int
    flagged: int
    status: str
    rank: int | None = None
    tied: bool = False
    tied_with: tuple[str, ...] = ()
    not_separated: tuple[str, ...] = ()
    seed_places: tuple[tuple[int, int], ...] = ()
    audit: str = ""
    verification: str = VERIFIED
    reproduction: str = ""
    notes: tuple[str, ...] = ()

    @property
    def ranked(self) -> bool:
        """Whether the entry is ranked."""
        return self.status == RANKED


@dataclass(frozen=True)
class Board:
    """One benchmark under one profile, dataset and settings, with its declared entries.

    Attributes:
        key: What defines the board.
        standings: Ranked entries by rank (then mean, then name), then unranked ones by name.
        cells: The entries' averaged cells (``entry`` names the entry; a cell in two
            entries appears twice).
        comparisons: (entry, entry) -> paired comparison (first minus second), for ranked pairs.
        power: What its paired test can detect, from its ranked entries' own seeds.
    """

    key: BoardKey
    standings: tuple[Standing, ...]
    cells: pd.DataFrame
    comparisons: Mapping[tuple[str, str], Comparison] = field(default_factory=dict)
    power: DetectionPower = DetectionPower(float("nan"), 0, 0, float("nan"))

    @property
    def ranked(self) -> tuple[Standing, ...]:
        """The ranked entries, best first."""
        return tuple(s for s in self.standings if s.ranked)

    @property
    def levels(self) -> int:
        """The number of distinct ranks among its ranked entries."""
        return len({s.rank for s in self.ranked})

    @property
    def separates(self) -> bool:
        """Whether its test separates at least one pair of ranked entries."""
        return self.levels > 1

    @property
    def cannot_rank(self) -> bool:
        """Whether it has two or more ranked entries and its test separates none of them."""
        return len(self.ranked) > 1 and not self.separates

    def standing(self, name: str) -> Standing:
        """Returns the standing of an entry by name.

        Raises:
            KeyError: No such entry on this board.
        """
        for standing in self.standings:
            if standing.name == name:
                return standing
        raise KeyError(name)


@dataclass
class Leaderboard:
    """Every board, plus the cells that are browsable but never ranked.

    Attributes:
        boards: Boards ordered by benchmark, profile, data and settings.
        exploration: Rows of :func:`~leaderboard.cells.cells_frame` not on any board,
            with ``reason``.
    """

    boards: list[Board]
    exploration: pd.DataFrame


def build_leaderboard(rows: pd.DataFrame, declarations: Sequence[Declaration]) -> Leaderboard:
    """Applies the protocol: declared cells onto boards, ranked; the rest to exploration.

    Args:
        rows: Result rows (see :func:`~leaderboard.cells.cells_frame`) with ``source``
            (``local`` or ``entry:<name>``) and ``run_id``.
        declarations: The declared entries (suites' and entry files').

    Returns:
        The leaderboard.
    """
    cells = cells_frame(rows)
    declarations = _unique_names(declarations)
    claims: dict[tuple[str, str], list[tuple[Declaration, DeclaredCell]]] = {}
    for declaration in declarations:
        for key, place in declaration.cells.items():
            claims.setdefault((declaration.source, key), []).append((declaration, place))
    declared, reasons = [], []
    for _, cell in cells.iterrows():
        found = claims.get((cell["source"], cell["cell_key"]), [])
        if cell["split"] != TEST_SPLIT:
            reasons.append(TUNING)
        elif not found:
            reasons.append(NOT_IN_ENTRY if cell["source"].startswith("entry:") else UNDECLARED)
        else:
            reasons.append("")
            # The declaration says where the cell sits (its configuration and seed).
            declared += [{**cell.to_dict(), "entry": d.name, "configuration": place.configuration, "seed": place.seed}
                         for d, place in found]
    exploration = cells.assign(reason=reasons)
    exploration = exploration[exploration["reason"] != ""].reset_index(drop=True)
    by_name = {d.name: d for d in declarations}
    boards = []
    if declared:
        frame = pd.DataFrame(declared)
        averaged = average_reruns(frame, by=("entry", "board", "cell_key"))
        for _, board_cells in averaged.groupby("board", sort=False):
            boards.append(_board(board_cells.reset_index(drop=True), by_name))
    boards.sort(key=lambda b: (b.key.benchmark, b.key.profile, not b.key.synthetic, b.key.settings,
                               b.key.dataset_fingerprint))
    return Leaderboard(boards, exploration)


def _unique_names(declarations: Sequence[Declaration]) -> list[Declaration]:
    """Returns the declarations with distinct names: a repeated name gets its source, then a number."""
    out: list[Declaration] = []
    taken: set[str] = set()
    counts: dict[str, int] = {}
    for d in declarations:
        counts[d.name] = counts.get(d.name, 0) + 1
    for d in declarations:
        name = d.name if counts[d.name] == 1 else f"{d.name} [{d.source}]"
        candidate, number = name, 2
        while candidate in taken:
            candidate, number = f"{name} #{number}", number + 1
        taken.add(candidate)
        out.append(d if candidate == d.name else dataclasses.replace(d, name=candidate))
    return out


def _board(cells: pd.DataFrame, declarations: Mapping[str, Declaration]) -> Board:
    key: BoardKey = cells["board_key"].iloc[0]
    standings = [_standing(declarations[name], entry_cells) for name, entry_cells in cells.groupby("entry", sort=True)]
    ranked = sorted((s for s in standings if s.ranked), key=lambda s: (-s.estimate.mean, s.name))
    comparisons = _comparisons(ranked)
    ranks = competition_ranks([s.estimate.mean for s in ranked],
                              lambda i, j: comparisons[(ranked[i].name, ranked[j].name)].separated)
    places = _seed_places(ranked)
    final = []
    for i, (standing, rank) in enumerate(zip(ranked, ranks)):
        same = tuple(other.name for j, other in enumerate(ranked) if j != i and ranks[j] == rank)
        others = tuple(other.name for j, other in enumerate(ranked) if j != i and ranks[j] != rank
                       and not comparisons[(standing.name, other.name)].separated)
        final.append(dataclasses.replace(standing, rank=rank, tied=bool(same), tied_with=same, not_separated=others,
                                         seed_places=places[standing.name]))
    final.sort(key=lambda s: (s.rank, -s.estimate.mean, s.name))
    final += sorted((s for s in standings if not s.ranked), key=lambda s: s.name)
    power = detection_power({s.name: s.hypervolumes for s in ranked})
    return Board(key, tuple(final), cells, comparisons, power)


def _seed_places(ranked: list[Standing]) -> dict[str, tuple[tuple[int, int], ...]]:
    """Returns each ranked entry's place on each of its seeds among the ranked entries with that seed."""
    seeds = sorted({seed for s in ranked for seed in s.hypervolumes})
    places: dict[str, list[tuple[int, int]]] = {s.name: [] for s in ranked}
    for seed in seeds:
        on_seed = [s for s in ranked if seed in s.hypervolumes]
        for s in on_seed:
            place = 1 + sum(other.hypervolumes[seed] > s.hypervolumes[seed] for other in on_seed)
            places[s.name].append((seed, place))
    return {name: tuple(pairs) for name, pairs in places.items()}


def _standing(declaration: Declaration, cells: pd.DataFrame) -> Standing:
    configurations = set(declaration.configurations(cells["board_key"].iloc[0].benchmark))
    hypervolumes: dict[int, float] = {}
    for seed in declaration.seeds:
        seed_cells = cells[cells["seed"] == seed]
        if set(seed_cells["configuration"]) != configurations:
            continue
        points = seed_cells[["utility", "privacy"]].to_numpy(dtype=float)
        points = np.clip(points[np.isfinite(points).all(axis=1)], 0.0, 1.0)
        hypervolumes[seed] = hypervolume_2d(points) if len(points) else 0.0
    complete = tuple(sorted(hypervolumes))
    flagged = int(cells["privacy"].isna().sum())
    status = declaration.problem() or _data_problem(complete, flagged, len(cells))
    estimate = mean_estimate([hypervolumes[s] for s in complete], bounds=(0.0, 1.0)) if complete else None
    return Standing(
        name=declaration.name, source=declaration.source, mechanism=declaration.mechanism, suite=declaration.suite,
        claim_type=_claim_type(cells), configurations=len(configurations), declared_seeds=tuple(declaration.seeds),
        complete_seeds=complete, hypervolumes=hypervolumes, estimate=estimate, cells=len(cells),
        runs=int(cells["runs"].sum()), flagged=flagged, status=status,
        audit=audit_text(cells["audit"]) if "audit" in cells else "",
        verification=f"unverified: {declaration.unverified}" if declaration.unverified else VERIFIED,
        reproduction=declaration.reproduction, notes=_notes(cells, estimate),
    )


def _notes(cells: pd.DataFrame, estimate: Estimate | None) -> tuple[str, ...]:
    """What an entry's interval and claims rest on, where a reader could take them for more."""
    notes = []
    if estimate is not None and estimate.clipped:
        notes.append(f"95% CI clipped to {HV_RANGE_TEXT}: the t-interval reached outside the range a hypervolume "
                     "can take")
    withheld = sorted({w for w in cells.get("withheld", pd.Series(dtype=str)) if w})
    if withheld:
        notes.append(f"claim withheld for {'; '.join(withheld)} (the mechanism fitted on it, no public data): "
                     "not a formal claim")
    if "backed" in cells and not cells.loc[cells["epsilon"].notna(), "backed"].astype(bool).all():
        notes.append("mechanism claim UNBACKED: its nominal ε is not covered by an analysis the code can back "
                     "(e.g. a threshold computed from private data): not a formal claim")
    if any(cells.get("tuning_cost", pd.Series(dtype=str)).astype(bool)):
        notes.append(f"DP-SGD settings selected by 'bench tune' on the private records: the {TUNING_NOT_IN_EPSILON} "
                     "(Papernot & Steinke 2022)")
    return tuple(notes)


def _data_problem(complete: tuple[int, ...], flagged: int, cells: int) -> str:
    if len(complete) < MIN_SEEDS:
        return f"needs ≥ {MIN_SEEDS} seeds ({len(complete)} complete)"
    if flagged == cells:
        return "attack too weak on every cell"
    return RANKED


def _comparisons(ranked: list[Standing]) -> dict[tuple[str, str], Comparison]:
    """Every ordered pair of ranked entries -> their comparison (:func:`leaderboard.stats.compare`)."""
    out: dict[tuple[str, str], Comparison] = {}
    for i, first in enumerate(ranked):
        for second in ranked[i + 1:]:
            comparison = compare(first.hypervolumes, second.hypervolumes)
            out[(first.name, second.name)] = comparison
            out[(second.name, first.name)] = comparison.flipped()
    return out


def _claim_type(cells: pd.DataFrame) -> str:
    """The entry's claim units, never a formal type for a claim that is none.

    A withheld claim reads ``<unit>, WITHHELD for <splits>``; one the code cannot back
    ``<unit>, UNBACKED``, as training claims do.
    """
    claimed = cells[cells["epsilon"].notna()]
    withheld = claimed["withheld"] if "withheld" in claimed else pd.Series("", index=claimed.index)
    backed = claimed["backed"] if "backed" in claimed else pd.Series(True, index=claimed.index)
    units = sorted({(unit or "unnamed unit") + ("" if b else f", {UNBACKED}") + (f", {WITHHELD} for {w}" if w else "")
                    for unit, w, b in zip(claimed["unit"], withheld, backed)})
    training = sorted({_training_type(label) for label in cells["training_claim"] if label})
    if units or training:
        return "; ".join(units + training)
    return EMPIRICAL_ONLY if cells["privacy"].notna().any() else NO_CLAIM


def _training_type(label: str) -> str:
    """``training record (DP-SGD)`` or ``training: non-private``; ``, UNBACKED`` or ``, REFUTED by its one-run audit``.

    A claim whose settings were tuned on the private records adds ``, tuning cost not in ε``.
    """
    if "UNBACKED" in label:
        return "training record (DP-SGD), UNBACKED"
    if REFUTED in label:
        return f"training record (DP-SGD), {REFUTED}"
    if label.endswith("non-private"):
        return "training: non-private"
    if label.endswith(f"({TUNING_NOT_IN_EPSILON})"):
        return f"training record (DP-SGD), {TUNING_NOT_IN_EPSILON}"
    return "training record (DP-SGD)"
