"""Results for the leaderboard: FINISHED MLflow runs and submitted entries as rows.

Each row is a ``Result.to_dict()`` plus ``source`` (``local`` for MLflow runs,
``entry:<name>`` for ``leaderboard/entries/*.json``), ``run_id`` and ``overrides`` (the
cell's ``--set`` sections, read from the run's config.json or the entry). Every run is a
row (re-runs of one cell are averaged later, by the board); runs superseded by a forced
re-run (tag ``bench.superseded_by``), results of an older schema and runs whose result cannot
be verified are left out and named (:class:`leaderboard.skipped.Skipped`), one warning line per kind.
"""

from __future__ import annotations

import ast
import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Collection, Iterator, Mapping
from urllib.parse import urlparse
from urllib.request import url2pathname

import pandas as pd

from bench.core.result import RESULT_SCHEMA, Result
from bench.errors import BenchError
from bench.scale.tune_cost import TUNING_COST_TAG
from bench.storage.tracking import SUPERSEDED
from bench.storage.tracking.health import StoreDamaged
from bench.storage.tracking.verify import CELL_KEY, LOST, RESULT_DIGEST, TAGLESS, UnverifiedResult, check_result
from leaderboard.bundles import BUNDLE_FORMAT, read_bundle, write_bundle  # noqa: F401 (their home before bundles)
from leaderboard.skipped import UNREADABLE, Skipped

if TYPE_CHECKING:
    from bench.storage.tracking import Tracker
    from leaderboard.declare import Declaration

__all__ = [
    "ENTRY_SCHEMA",
    "ENTRIES_DIR",
    "SUPERSEDED",
    "Skipped",
    "combine",
    "entries_frame",
    "load_entry",
    "read_bundle",
    "read_entries",
    "runs_frame",
    "sample_sheets",
    "write_bundle",
]

ENTRY_SCHEMA = 2
"""2: entries declare their configurations (``declaration``); 1 is still read."""
READABLE_ENTRY_SCHEMAS = (1, 2)
ENTRIES_DIR = Path(__file__).resolve().parent / "entries"
ENTRY_KEYS = ("schema", "name", "mechanism", "cells")


def runs_frame(tracker: "Tracker", skipped: Skipped | None = None) -> pd.DataFrame:
    """Returns one row per FINISHED run that holds a current result.

    Args:
        tracker: Where the runs are.
        skipped: Counts the runs left out (superseded, old schema) and names the runs it could
            not verify or read (their tags gone, a result.json changed, unreadable or lost).

    Raises:
        StoreDamaged: Every FINISHED run lost its result.json (the artifacts folder is gone):
            the store is damaged, not empty.
    """
    rows: list[dict[str, Any]] = []
    skipped = skipped if skipped is not None else Skipped()
    old = current = 0
    lost: list[Any] = []
    for run in _finished(tracker):
        if SUPERSEDED in run.data.tags:
            skipped.superseded += 1
            continue
        if CELL_KEY not in run.data.tags:
            if {"task", "mechanism"} <= set(run.data.params):  # a cell's run (start_cell logs these): its tags are gone
                skipped.leave_out(TAGLESS, run)
            continue
        current += 1
        data = _artifact(tracker, run, "result.json", binary=True)
        if data is None and RESULT_DIGEST in run.data.tags:
            lost.append(run)
            continue
        try:
            raw = json.loads(data) if data is not None else None
        except ValueError:
            raw = None
        if isinstance(raw, dict) and raw.get("schema") == 1:
            old += 1
            continue
        if data is not None:
            try:
                check_result(run, data)
            except UnverifiedResult as exc:
                skipped.leave_out(exc.kind, run)
                continue
        try:
            result = Result.from_dict(raw) if isinstance(raw, dict) else None
        except (ValueError, TypeError, KeyError):
            result = None
        if result is None:
            skipped.leave_out(UNREADABLE, run)
            continue
        rows.append({**result.to_dict(), "source": "local", "run_id": run.info.run_id,
                     "overrides": _overrides(_artifact(tracker, run, "config.json")),
                     "tuning_cost": run.data.tags.get(TUNING_COST_TAG, "")})
    if old:
        skipped.old_schema["the MLflow runs"] = old
    if lost and len(lost) == current and not _moved(tracker):
        raise StoreDamaged(tracker.uri, f"the result.json of every one of its {current} FINISHED run(s) is missing "
                                        f"({_artifact_folder(lost[0])}); restore its artifacts folder, or compute the "
                                        "cells again")
    for run in lost:
        skipped.leave_out(LOST, run)
    return pd.DataFrame(rows)


def _moved(tracker: Any) -> bool:
    """Whether the store was copied or moved and still reads its artifacts elsewhere (relocate's case, not damage)."""
    from bench.storage.tracking.relocate import moved_from

    try:
        old = moved_from(tracker.results_dir)
    except Exception:  # a store of another schema: not a copied folder of ours
        return False
    return old is not None


def _artifact_folder(run: Any) -> str:
    """Names where a run's artifacts were, saying when the folder that held every run's is gone."""
    uri = run.info.artifact_uri or ""
    if not uri.startswith("file:"):
        return uri
    folder = Path(url2pathname(urlparse(uri).path)).parent.parent  # <artifacts>/<run id>/artifacts
    return f"{folder} does not exist" if not folder.exists() else f"e.g. {uri}"


def _overrides(config_json: str | None) -> dict[str, Any]:
    """Returns the ``--set`` sections logged in a run's config.json (``run.overrides``)."""
    try:
        value = json.loads(config_json)["run"]["overrides"] if config_json else {}
    except (ValueError, KeyError, TypeError):
        return {}
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return {"unparsed": {"value": value}}
    return value if isinstance(value, dict) else {}


def load_entry(path: str | Path, skipped: Skipped | None = None) -> dict[str, Any]:
    """Reads and checks one entry file; cells of result schema 1 are dropped (and counted in ``skipped``).

    Raises:
        BenchError: Not JSON, a schema this version does not read, missing keys, or a
            cell that is not a result.
    """
    path = Path(path)
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise BenchError(f"entry {path.name}: not a readable JSON file ({exc})") from None
    if not isinstance(entry, dict) or any(k not in entry for k in ENTRY_KEYS):
        raise BenchError(f"entry {path.name}: needs keys {', '.join(ENTRY_KEYS)} (see leaderboard/entries/README.md)")
    if entry["schema"] not in READABLE_ENTRY_SCHEMAS:
        raise BenchError(f"entry {path.name}: schema {entry['schema']!r}, this version reads "
                         f"{', '.join(map(str, READABLE_ENTRY_SCHEMAS))}")
    if not isinstance(entry["cells"], list) or not entry["cells"]:
        raise BenchError(f"entry {path.name}: 'cells' must be a non-empty list of results")
    if entry["schema"] >= 2 and not isinstance(entry.get("declaration"), dict):
        raise BenchError(f"entry {path.name}: schema {entry['schema']} needs a 'declaration' (see "
                         "leaderboard/entries/README.md)")
    current, old = [], 0
    for i, cell in enumerate(entry["cells"]):
        if isinstance(cell, dict) and cell.get("schema") == 1:
            old += 1
            continue
        try:
            if not isinstance(cell, dict) or cell.get("schema") != RESULT_SCHEMA:
                raise ValueError(f"result schema {cell.get('schema') if isinstance(cell, dict) else None!r}")
            Result.from_dict(cell)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise BenchError(f"entry {path.name}: cells[{i}] is not a result ({exc})") from None
        current.append(cell)
    if old and skipped is not None:
        skipped.old_schema[f"entry {path.name}"] = old
    return {**entry, "cells": current}


def read_entries(folder: str | Path = ENTRIES_DIR, skipped: Skipped | None = None, data_root: Path | None = None,
                 current: Collection[str] = (), exclude: Collection[str] = ()) -> tuple[pd.DataFrame, list["Declaration"]]:
    """Returns one row per cell of every ``*.json`` entry in a folder, and the entries' declarations.

    Each entry is checked (:func:`leaderboard.verification.check_entry`) and its cells are
    planned with today's code (:func:`leaderboard.staleness.check_staleness`, real data
    under ``data_root``; cells whose key is in ``current``, keys today's code already
    planned, are not planned again): its declaration says why it is unverified or stale
    (and ``skipped`` names stale and unchecked entries) and whether it is reproduced or a
    pinned baseline (:func:`leaderboard.reproduced.reproduction_of`; else self-reported, never
    ranked), and each row carries the ``audit`` verdict of its claim and
    its ``tuning_cost`` note (what ``bench submit`` copied of its run's ``bench.tuning_cost`` tag).
    Entries named in ``exclude`` (the user's, over shipped ones of those names) are left
    out and named in ``skipped.shadowed``.

    Raises:
        BenchError: A malformed entry, or two entries with one name.
    """
    import dataclasses

    from leaderboard.declare import declaration_from_entry
    from leaderboard.entry_code import load_entry_code
    from leaderboard.reproduced import reproduction_of
    from leaderboard.staleness import check_staleness
    from leaderboard.verification import check_entry

    rows: list[dict[str, Any]] = []
    declarations = []
    names: dict[str, str] = {}
    for path in sorted(Path(folder).glob("*.json")):
        entry = load_entry(path, skipped)
        name = str(entry["name"])
        if name in names:
            raise BenchError(f"entries {names[name]} and {path.name} have the same name {name!r}")
        names[name] = path.name
        if name in exclude:
            if skipped is not None:
                skipped.shadowed[name] = path.name
            continue
        code_problem = load_entry_code(entry)  # a one-file mechanism the entry carries
        check = check_entry(entry)
        problems = [code_problem] if code_problem and not check.verified else []
        staleness = check_staleness(entry, data_root, current)
        if skipped is not None and staleness.is_stale:
            skipped.stale[name] = staleness.summary()
        if skipped is not None and staleness.unchecked:
            skipped.unchecked[name] = staleness.unchecked[0]
        reproduction = reproduction_of(path)
        declarations.append(dataclasses.replace(declaration_from_entry(entry),
                                                unverified="; ".join(problems + list(check.problems)),
                                                stale=staleness.summary(), reproduction=reproduction.text,
                                                self_reported="" if reproduction.reproduced else reproduction.text))
        default = (entry.get("suite") or {}).get("overrides") or {}
        for cell in entry["cells"]:
            result = Result.from_dict(cell)
            rows.append({**result.to_dict(), "source": f"entry:{name}", "run_id": str(cell.get("run_id", "")),
                         "overrides": cell.get("overrides", default), "audit": check.audits.get(result.cell_key, ""),
                         "tuning_cost": str(cell.get("tuning_cost") or "")})
    return pd.DataFrame(rows), declarations


def entries_frame(folder: str | Path = ENTRIES_DIR, skipped: Skipped | None = None) -> pd.DataFrame:
    """Returns one row per cell of every entry in a folder (see :func:`read_entries`)."""
    return read_entries(folder, skipped)[0]


def combine(runs: pd.DataFrame, entries: pd.DataFrame) -> pd.DataFrame:
    """Returns runs and entries together; a cell key in an entry replaces the local run of it."""
    if len(entries) == 0:
        return runs.reset_index(drop=True)
    if len(runs) == 0:
        return entries.reset_index(drop=True)
    local = runs[~runs["cell_key"].isin(set(entries["cell_key"]))]
    return pd.concat([local, entries], ignore_index=True)


def sample_sheets(tracker: "Tracker", runs: pd.DataFrame, folder: str | Path) -> dict[str, Path]:
    """Copies one sample sheet per mechanism (its newest run's samples.png) into ``folder``.

    Returns:
        Mechanism name -> the copied PNG.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {}
    local = runs[runs["source"] == "local"] if len(runs) else runs
    if not len(local):
        return out
    newest = local.sort_values("created").groupby("mechanism", sort=True).tail(1)
    for i, row in enumerate(newest.itertuples(index=False)):
        try:
            run = tracker.client.get_run(row.run_id)
        except Exception:
            continue
        data = _artifact(tracker, run, "samples.png", binary=True)
        if data is not None:
            path = folder / f"sheet-{i}.png"
            path.write_bytes(data)
            out[row.mechanism] = path
    return out


def _finished(tracker: "Tracker") -> Iterator[Any]:
    token = None
    while True:
        page = tracker.client.search_runs(
            [tracker.experiment_id], filter_string="attributes.status = 'FINISHED'", max_results=5000, page_token=token,
        )
        yield from page
        token = page.token
        if not token:
            return


def _artifact(tracker: "Tracker", run: Any, name: str, binary: bool = False) -> Any:
    uri = run.info.artifact_uri or ""
    if uri.startswith("file:") or "://" not in uri:
        path = Path(url2pathname(urlparse(uri).path) if uri.startswith("file:") else uri) / name
        if not path.is_file():
            return None
        return path.read_bytes() if binary else path.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory() as tmp:
        try:
            local = Path(tracker.client.download_artifacts(run.info.run_id, name, tmp))
        except Exception:
            return None
        return local.read_bytes() if binary else local.read_text(encoding="utf-8")


def entry_summary(entry: Mapping[str, Any]) -> str:
    """Returns one line describing an entry: name, mechanism, cells and suite."""
    suite = entry.get("suite") or {}
    return (f"{entry['name']}: mechanism {entry['mechanism']}, {len(entry['cells'])} cells"
            + (f", suite {suite.get('name')} ({suite.get('profile')})" if suite else ""))
