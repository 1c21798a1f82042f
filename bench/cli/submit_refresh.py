"""``bench submit --refresh``: recompute exactly the stale cells of entries and rewrite those entries.

A cell is stale when today's code plans it under another key than the one its entry
records (:mod:`leaderboard.staleness`: a mechanism, task, dataset or adversary version
bump). Refreshing plans every cell of each selected stale entry from what the entry records
(as ``bench leaderboard verify`` does), hands only the stale ones to the grid (which also
reuses any that are already finished in the results directory), and writes the entry again
with the new cells in their place and every other cell byte for byte as it was. When the
mechanism's version changed, its conformance suite and the audits of its claims run again
first, as for a new submission. Everything is checked before any cell runs, and an entry is
written only once all of its cells are done.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.cli.grid_cmd import executor_config, placement, run_grid, split_names
from bench.errors import BenchError
from bench.system import precision

__all__ = ["StaleEntry", "refresh", "stale_entries"]


@dataclass
class StaleEntry:
    """An entry to refresh.

    Attributes:
        path: Its file.
        entry: Its contents (:func:`leaderboard.store.load_entry`).
        cells: Every declared cell, planned today (:class:`bench.scale.grid.Cell`), in the entry's order.
        stale: Old key -> the cell planned today, for the stale ones.
        why: Why they are stale (one line).
    """

    path: Path
    entry: dict[str, Any]
    cells: list
    stale: dict[str, Any]
    why: str


def refresh(args: argparse.Namespace) -> int:
    """Recomputes the stale cells of the selected entries and rewrites them; prints what it did.

    Raises:
        BenchError: No such entry, an entry that is unverified or cannot be planned here,
            or a cell that failed (no entry is then written).
    """
    from bench.cli.leaderboard_cmd import entry_folders

    given = [flag for flag, value in (("--suite", args.suite), ("--task", args.task), ("--param", args.param),
                                      ("--seeds", args.seeds), ("--profile", args.profile), ("--set", args.overrides),
                                      ("--attacks", args.attacks), ("--precision", args.precision != precision.DEFAULT))
             if value]
    if given:
        raise BenchError(f"--refresh recomputes the cells each entry declares, so {', '.join(given)} cannot change "
                         "them; select entries with --name or --mechanism only")
    from bench.cli.submit_gate import finish_isolation, isolated_executor, load_files

    isolation = load_files(args, "submit --refresh")  # a --mechanism-file runs isolated, as in submit
    folders = entry_folders(args)  # the user's entries only: the shipped baselines are read-only
    folder = folders.folder
    if not folder.is_dir():
        raise BenchError(f"{folders.label} is not a folder of entries")
    folders.check_writable()
    where = placement(args)
    todo = stale_entries(folder, args.name, split_names(args.mechanism), where)
    if not todo:
        print(f"no stale entries in {folder}: every cell is what this code computes")
        return 0
    for item in todo:
        print(f"[bench] submit --refresh: {item.entry['name']}: {item.why}", file=sys.stderr, flush=True)
    cells = list({c.key: c for item in todo for c in item.stale.values()}.values())
    summary = run_grid(cells, where, isolated_executor(executor_config(args), isolation))
    print(summary.format(), file=sys.stderr)
    finish_isolation(isolation)
    if summary.failed:
        raise BenchError(f"{len(summary.failed)} of {len(cells)} cells failed (listed above); no entry rewritten, "
                         "rerun to retry them")
    outcomes = {o.key: o for o in summary.outcomes}
    for item in todo:
        path = rewrite(item, outcomes, where)
        print(f"entry refreshed: {path} ({len(item.stale)} of {len(item.cells)} cells recomputed)")
    return 0


def stale_entries(folder: Path, name: str | None, mechanisms: list[str] | None, where) -> list[StaleEntry]:
    """Returns the selected entries that have stale cells, each planned in full; checks everything first.

    Args:
        folder: The entries folder.
        name: Only the entry of this name (``--name``), else all.
        mechanisms: Only entries of these mechanisms (``--mechanism``), else all.
        where: The placement the cells would run in.

    Raises:
        BenchError: ``--name`` names no entry, or a selected stale entry is unverified or
            has cells that cannot be planned here.
    """
    from bench.core.config import did_you_mean
    from leaderboard.staleness import check_staleness
    from leaderboard.store import load_entry
    from leaderboard.verification import check_entry

    entries = [(path, load_entry(path)) for path in sorted(folder.glob("*.json"))]
    if name is not None and name not in {str(e["name"]) for _, e in entries}:
        names = [str(e["name"]) for _, e in entries]
        raise BenchError(f"--name: no entry {name!r} in {folder}{did_you_mean(name, names)}")
    chosen = [(p, e) for p, e in entries if (name is None or e["name"] == name)
              and (not mechanisms or e["mechanism"] in mechanisms)]
    out = []
    for path, entry in chosen:
        staleness = check_staleness(entry, where.data_root)
        if not staleness.is_stale:
            continue
        if staleness.unchecked:
            raise BenchError(f"entry {entry['name']!r}: a cell cannot be planned here ({staleness.unchecked[0]}); "
                             "pass --data-root, or refresh it where its data is")
        check = check_entry(entry)
        if not check.verified:
            raise BenchError(f"entry {entry['name']!r} is {check.status}; resubmit it with 'bench submit' instead")
        cells = [_planned(entry, cell, where) for cell in entry["cells"]]
        stale = {str(old["cell_key"]): new for old, new in zip(entry["cells"], cells) if new.key != old["cell_key"]}
        out.append(StaleEntry(path, entry, cells, stale, staleness.summary()))
    return out


def _planned(entry: dict[str, Any], cell: dict[str, Any], where):
    """Plans one recorded cell as it would run today (a grid cell, logging where ``where`` says)."""
    from bench.scale.grid import Cell, cell_label
    from leaderboard.reproduce import plan_cell

    device = None if where.device in (None, "auto") else where.device
    plan = plan_cell(entry, cell, where.results_dir, where.cache_dir, where.data_root, device)
    config = dataclasses.replace(plan.config, params=dict(plan.mechanism.config), tracking_uri=where.tracking_uri)
    return Cell(config, plan.key, cell_label(config))


def rewrite(item: StaleEntry, outcomes: dict[str, Any], where) -> Path:
    """Writes an entry with its stale cells replaced by the recomputed ones; returns its path.

    Unchanged cells stay as recorded. The declaration lists today's keys; the entry's
    ``refreshed`` record says when, by which commit, how many cells, why and in which store
    (its tracking URI, as :func:`leaderboard.locations.portable_uri` records one). A new
    mechanism version reruns conformance and the claims' audits and takes its sample
    sheet from the new runs.
    """
    from bench.cell.provenance import git_sha, versions
    from bench.cli.entry_files import attach_sheet, cell_record, conformance, submission_audit, write_entry
    from bench.core.registry import mechanisms
    from bench.storage.tracking import Tracker
    from leaderboard.declare import declaration_block, declaration_from_entry
    from leaderboard.locations import portable_uri
    from leaderboard.sheets import SHEET_FIELD

    entry = dict(item.entry)
    tracker = Tracker(where.results_dir, where.tracking_uri)
    overrides = (entry.get("suite") or {}).get("overrides") or {}
    cells = [cell_record(outcomes[item.stale[str(old["cell_key"])].key], old.get("overrides", overrides), tracker)
             if str(old["cell_key"]) in item.stale else old for old in entry["cells"]]
    name = str(entry["mechanism"])
    version = mechanisms.get(name).version
    if entry.get("mechanism_version") != version:
        entry["conformance"] = {"passed": True, "checks": conformance(name)}
        entry["audit"] = submission_audit(name, item.cells)
        entry["mechanism_version"] = version
        entry.pop(SHEET_FIELD, None)  # the old version's outputs: shown only if a new run logged a sheet
        attach_sheet(entry, item.path.parent, [outcomes[c.key].run_id for c in item.stale.values()], tracker)
    declared = declaration_from_entry(item.entry)
    entry["declaration"] = declaration_block(declared.suite, declared.profile, declared.seeds, item.cells)
    entry["cells"] = cells
    entry["dataset_fingerprints"] = {c["dataset"]: c["dataset_fingerprint"] for c in cells}
    entry["git_sha"], entry["versions"] = git_sha(), versions()
    # No absolute local path is kept: the original store's (an older entry may record one) and the new cells' store.
    if entry.get("tracking_uri"):
        entry["tracking_uri"] = portable_uri(entry["tracking_uri"])
    entry["refreshed"] = {"at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                          "git_sha": entry["git_sha"], "cells": len(item.stale), "why": item.why,
                          "tracking_uri": portable_uri(where.tracking_uri)}
    return write_entry(entry, item.path.parent, item.path)
