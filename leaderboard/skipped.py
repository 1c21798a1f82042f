"""What reading results left out, and why: one warning line per kind, naming the runs.

Every view that reads the tracking store's FINISHED runs (``bench leaderboard build|show``,
``bench report``) reads them through :func:`leaderboard.store.runs_frame`, which leaves out
a run whose result cannot be shown as its cell's: superseded by a re-run, of an older
result schema, or not verified (:mod:`bench.storage.tracking.verify`). Each kind is one
line that names the first :data:`NAMED` runs (run id prefix, as ``bench runs`` and ``bench
show`` take it, and cell key) and counts the rest, so a board or report that is missing a
run says which and why, and one left with nothing says so in its one error line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bench.storage.tracking.verify import CELL_KEY, CHANGED, LOST, TAGLESS, UNDIGESTED

NAMED = 3
"""Runs named in a line; further ones are counted."""
ID_WIDTH = 12
"""Characters of a run id named (a prefix ``bench show`` takes, as ``bench runs`` shows it)."""
UNREADABLE = "unreadable"

RUN_KINDS = {
    LOST: ("the tracking store is damaged: {n} FINISHED run(s) lost their result.json (artifacts deleted); left out",
           "'bench run' computes such a cell again"),
    UNREADABLE: ("{n} FINISHED run(s) have no readable result.json; left out", ""),
    CHANGED: ("{n} FINISHED run(s) have a result.json that does not match the digest logged with it (changed after "
              "the run ended); left out", "'bench run --force' computes such a cell again"),
    UNDIGESTED: ("{n} FINISHED run(s) were logged before PrivBench recorded result digests, so their result.json "
                 "cannot be verified; left out", "'bench run --force' computes such a cell again"),
    TAGLESS: ("{n} FINISHED run(s) lost their tags in the tracking database (no cell key, no result digest), so "
              "their result.json cannot be verified; left out", "'bench run' computes such a cell again"),
}
"""Kind of run left out -> (what happened, with ``{n}`` runs; what replaces them)."""


def run_label(run: Any) -> str:
    """Names a run as a user finds it again: ``run <id prefix>``, with its cell key prefix when it has one."""
    key = run.data.tags.get(CELL_KEY, "")
    return f"run {run.info.run_id[:ID_WIDTH]}" + (f" (cell {key[:ID_WIDTH]})" if key else "")


@dataclass
class Skipped:
    """What reading left out, for one warning line per kind.

    Attributes:
        old_schema: Where (``the MLflow runs``, ``entry x.json``) -> results of schema 1.
        superseded: Runs a forced re-run replaced.
        runs: Kind (:data:`RUN_KINDS`) -> the FINISHED runs of that kind left out, as
            :func:`run_label` names them.
        stale: Entry name -> why its cells are stale (:mod:`leaderboard.staleness`).
        unchecked: Entry name -> a cell whose key could not be planned here (its data is absent).
        shadowed: Entry name -> the shipped file a user's entry of that name hides on the boards.
    """

    old_schema: dict[str, int] = field(default_factory=dict)
    superseded: int = 0
    runs: dict[str, list[str]] = field(default_factory=dict)
    stale: dict[str, str] = field(default_factory=dict)
    unchecked: dict[str, str] = field(default_factory=dict)
    shadowed: dict[str, str] = field(default_factory=dict)

    def leave_out(self, kind: str, run: Any) -> None:
        """Records a FINISHED run left out, and why (a kind of :data:`RUN_KINDS`)."""
        self.runs.setdefault(kind, []).append(run_label(run))

    @property
    def unverified(self) -> int:
        """How many runs were left out because their result.json cannot be verified."""
        return sum(len(self.runs.get(kind, ())) for kind in (CHANGED, UNDIGESTED, TAGLESS))

    @property
    def unreadable(self) -> int:
        """How many runs were left out because their result.json cannot be read as a result."""
        return len(self.runs.get(UNREADABLE, ()))

    @property
    def missing(self) -> int:
        """How many runs were left out because their result.json is gone (artifacts deleted)."""
        return len(self.runs.get(LOST, ()))

    def runs_left_out(self) -> list[str]:
        """Returns one line per kind of FINISHED run left out, naming the first :data:`NAMED` runs."""
        out = []
        for kind, (what, remedy) in RUN_KINDS.items():
            labels = self.runs.get(kind)
            if not labels:
                continue
            named = ", ".join(labels[:NAMED])
            more = f" and {len(labels) - NAMED} more ('bench runs' lists them)" if len(labels) > NAMED else ""
            out.append(what.format(n=len(labels)) + f": {named}{more}" + (f" ({remedy})" if remedy else ""))
        return out

    def notes(self) -> list[str]:
        """Returns one line per kind of result left out (none when nothing was)."""
        out = []
        if self.old_schema:
            where = ", ".join(f"{n} in {place}" for place, n in self.old_schema.items())
            out.append(f"{sum(self.old_schema.values())} result(s) of schema 1 skipped ({where}): they were scored "
                       "with the old formula (a useless attack counted as privacy 1.0); rerun them to include them")
        out.extend(self.runs_left_out())
        if self.superseded:
            out.append(f"{self.superseded} run(s) superseded by a forced re-run left out")
        for name, why in self.stale.items():
            out.append(f"entry {name!r} is stale, shown unranked: {why}; 'bench submit --refresh --name {name}' "
                       "recomputes those cells")
        for name, why in self.unchecked.items():
            out.append(f"entry {name!r}: whether its cells are stale cannot be checked here ({why})")
        for name, file in self.shadowed.items():
            out.append(f"your entry {name!r} has the name of a shipped baseline ({file}): the boards show yours, "
                       "not the baseline; resubmit yours with another --name to see both")
        return out

    def nothing_left(self, where: str) -> str:
        """Returns the one error line of a view left with no cells: why, when runs were left out, else how to fill it.

        Args:
            where: The places read (``results or ./leaderboard/entries``).
        """
        lines = self.runs_left_out()
        if self.old_schema:
            lines.insert(0, f"{sum(self.old_schema.values())} result(s) of schema 1 skipped (scored with the old "
                            "formula; rerun them)")
        if self.superseded and not lines:
            lines.append(f"{self.superseded} run(s) superseded by a forced re-run left out")
        if not lines:
            return f"no finished cells in {where} (run 'bench run' or 'bench grid' first)"
        return f"no finished cells in {where} that can be shown: " + "; ".join(lines)
