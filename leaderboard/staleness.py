"""Stale entries: cells the code of today would compute under another key.

A cell's key names everything its numbers depend on (:func:`bench.cell.plan.plan`): the
mechanism's version and resolved parameters, the task's and adversaries' settings, and the
versions of their code (:func:`bench.cell.protocol.code_versions`). When a release bumps one
of those, an entry computed before it no longer describes this code: its cells are *stale*.
The board shows such an entry and why, and never ranks it; ``bench submit --refresh``
recomputes exactly its stale cells (:mod:`bench.cli.submit_refresh`).

Each cell is planned here from what the entry records, as ``bench leaderboard verify`` plans
it (:func:`leaderboard.reproduce.plan_cell`), without computing anything. A mechanism that
is no longer at its cells' version makes them stale without planning. A cell that cannot be
planned on this machine (a real dataset that is not here) is *unchecked*, not stale: the
entry keeps its rank and the board says what could not be checked.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Collection, Mapping

from bench.errors import BenchError

__all__ = ["Staleness", "check_staleness", "planned_keys"]


@dataclass(frozen=True)
class Staleness:
    """What planning an entry's cells with today's code found.

    Attributes:
        stale: Old cell key -> its key today (``""`` when the mechanism's version alone says so).
        reasons: Why, in words (one per cause, e.g. ``mechanism blur version 1, 2 registered``).
        unchecked: Cells that could not be planned here, with the first reason.
        cells: How many cells the entry holds.
    """

    stale: Mapping[str, str] = field(default_factory=dict)
    reasons: tuple[str, ...] = ()
    unchecked: tuple[str, ...] = ()
    cells: int = 0

    @property
    def is_stale(self) -> bool:
        """Whether any cell is stale."""
        return bool(self.stale)

    def summary(self) -> str:
        """Returns one line: ``""`` when nothing is stale, else how many cells and why."""
        if not self.stale:
            return ""
        why = "; ".join(self.reasons) or "the code or settings behind their keys changed"
        return f"{len(self.stale)} of {self.cells} cell(s) computed by older code ({why})"


def check_staleness(entry: Mapping[str, Any], data_root: Path | None = None,
                    current: Collection[str] = ()) -> Staleness:
    """Plans every cell of an entry with today's code and says which keys changed.

    Args:
        entry: The entry (:func:`leaderboard.store.load_entry`).
        data_root: Root of real datasets (planning a real-data cell inspects its data).
        current: Cell keys today's code is already known to plan (a shipped suite's
            expansion): a cell recording one of them is current without planning it again.

    Returns:
        The stale cells and why; unplannable cells are listed as unchecked.

    Under the ``bench`` command the answer is kept for this code, the entry's bytes and the
    keys of ``current`` it holds, and read back while it holds (:mod:`bench.storage.derived`).
    """
    from bench.core import registry
    from bench.storage import derived
    from bench.system.bounds import watching

    inputs = _inputs(entry, current) if data_root is None and derived.is_enabled() else None
    if inputs is not None and registry.untouched():
        kept = derived.recall("staleness", inputs)
        if isinstance(kept, dict) and derived.fits(kept.get("peak")):
            try:
                return Staleness(stale={str(k): str(v) for k, v in kept["stale"].items()},
                                 reasons=tuple(map(str, kept["reasons"])), unchecked=tuple(map(str, kept["unchecked"])),
                                 cells=int(kept["cells"]))
            except (KeyError, TypeError, ValueError, AttributeError):
                pass
    with watching() as memory:
        found = _check_staleness(entry, data_root, current)
    if inputs is not None and not memory.refused and registry.only_builtins():
        derived.keep("staleness", inputs, {"peak": memory.peak, "stale": dict(found.stale), "reasons": list(found.reasons),
                                           "unchecked": list(found.unchecked), "cells": found.cells})
    return found


def _inputs(entry: Mapping[str, Any], current: Collection[str]) -> Any:
    """Returns what checking an entry reads besides the code: the entry, and which of its keys are known current."""
    from leaderboard.verification import entry_digest

    digest = entry_digest(entry)
    if digest is None:
        return None
    keys = {str(c.get("cell_key")) for c in entry.get("cells") or [] if isinstance(c, Mapping)}
    return {"entry": digest, "current": sorted(keys & {str(k) for k in current})}


def _check_staleness(entry: Mapping[str, Any], data_root: Path | None, current: Collection[str]) -> Staleness:
    from bench.core.registry import mechanisms

    cells = [c for c in entry.get("cells") or [] if isinstance(c, Mapping)]
    name = str(entry.get("mechanism"))
    if name not in mechanisms:
        return Staleness(cells=len(cells))  # verification says the mechanism is unknown
    registered = getattr(mechanisms.get(name), "version", None)
    ran = sorted({str(c.get("mechanism_version")) for c in cells if c.get("mechanism_version") != registered})
    reasons = [f"mechanism {name} version {', '.join(ran)}, version {registered} registered"] if ran else []
    keys, unchecked = planned_keys(entry, [c for c in cells if str(c.get("cell_key")) not in current], data_root)
    stale = {str(c.get("cell_key")): keys.get(str(c.get("cell_key")), "") for c in cells
             if c.get("mechanism_version") != registered
             or keys.get(str(c.get("cell_key")), str(c.get("cell_key"))) != str(c.get("cell_key"))}
    if stale and not reasons:
        reasons = ["the task's, its data's or an adversary's settings or code version changed"]
    return Staleness(stale=stale, reasons=tuple(reasons), unchecked=tuple(unchecked), cells=len(cells))


def planned_keys(entry: Mapping[str, Any], cells: list[Mapping[str, Any]],
                 data_root: Path | None = None) -> tuple[dict[str, str], list[str]]:
    """Returns each cell's key as planned today (recorded key -> planned key), and the cells that could not be planned.

    Nothing is computed or written: planning only checks that the (temporary) results
    folder could be written.
    """
    from leaderboard.reproduce import plan_cell

    keys: dict[str, str] = {}
    unchecked: list[str] = []
    memo: dict = {}  # cells of one setting share its planning (only their keys are kept)
    with tempfile.TemporaryDirectory(prefix="bench-stale-") as tmp:
        for cell in cells:
            try:
                keys[str(cell.get("cell_key"))] = plan_cell(entry, cell, Path(tmp), None, data_root, "cpu", memo).key
            except BenchError as exc:
                unchecked.append(f"{cell.get('task')} seed {cell.get('seed')}: {' '.join(str(exc).split())}")
            except (KeyError, TypeError, ValueError) as exc:
                unchecked.append(f"{cell.get('task')} seed {cell.get('seed')}: not a plannable cell ({exc})")
    return keys, unchecked
