"""Results for the leaderboard: FINISHED MLflow runs and submitted entries as one DataFrame.

Each row is a ``Result.to_dict()`` plus ``source`` (``local`` for MLflow runs,
``entry:<name>`` for ``leaderboard/entries/*.json``) and ``run_id``. A cell present both
locally and in an entry is shown once, as the entry's.
"""

from __future__ import annotations

import json
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping
from urllib.parse import urlparse
from urllib.request import url2pathname

import pandas as pd

from bench.errors import BenchError
from bench.interfaces import Result

if TYPE_CHECKING:
    from bench.tracking import Tracker

__all__ = ["ENTRY_SCHEMA", "ENTRIES_DIR", "combine", "entries_frame", "load_entry", "runs_frame", "sample_sheets"]

ENTRY_SCHEMA = 1
ENTRIES_DIR = Path(__file__).resolve().parent / "entries"
ENTRY_KEYS = ("schema", "name", "mechanism", "cells")


def runs_frame(tracker: "Tracker", profile: str | None = None) -> pd.DataFrame:
    """Returns one row per cell with a FINISHED run (the newest run when a cell has several).

    Args:
        tracker: Where the runs are.
        profile: Keep only cells of this profile.
    """
    rows: dict[str, dict[str, Any]] = {}
    unreadable = 0
    for run in _finished(tracker):
        data = _artifact(tracker, run, "result.json")
        try:
            result = Result.from_dict(json.loads(data)) if data is not None else None
        except (ValueError, TypeError, KeyError):
            result = None
        if result is None:
            unreadable += 1
            continue
        if profile is not None and result.profile != profile:
            continue
        row = {**result.to_dict(), "source": "local", "run_id": run.info.run_id, "_started": run.info.start_time}
        known = rows.get(result.cell_key)
        if known is None or known["_started"] < row["_started"]:
            rows[result.cell_key] = row
    if unreadable:
        warnings.warn(f"{unreadable} FINISHED run(s) have no readable result.json; left out", stacklevel=2)
    frame = pd.DataFrame(list(rows.values()))
    return frame.drop(columns=["_started"]) if len(frame) else frame


def load_entry(path: str | Path) -> dict[str, Any]:
    """Reads and checks one entry file.

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
    if entry["schema"] != ENTRY_SCHEMA:
        raise BenchError(f"entry {path.name}: schema {entry['schema']!r}, this version reads {ENTRY_SCHEMA}")
    if not isinstance(entry["cells"], list) or not entry["cells"]:
        raise BenchError(f"entry {path.name}: 'cells' must be a non-empty list of results")
    for i, cell in enumerate(entry["cells"]):
        try:
            Result.from_dict(cell)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise BenchError(f"entry {path.name}: cells[{i}] is not a result ({exc})") from None
    return entry


def entries_frame(folder: str | Path = ENTRIES_DIR, profile: str | None = None) -> pd.DataFrame:
    """Returns one row per cell of every ``*.json`` entry in a folder (empty if there is none).

    Raises:
        BenchError: A malformed entry, or two entries with one name.
    """
    rows: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for path in sorted(Path(folder).glob("*.json")):
        entry = load_entry(path)
        name = str(entry["name"])
        if name in names:
            raise BenchError(f"entries {names[name]} and {path.name} have the same name {name!r}")
        names[name] = path.name
        for cell in entry["cells"]:
            result = Result.from_dict(cell)
            if profile is None or result.profile == profile:
                rows.append({**result.to_dict(), "source": f"entry:{name}", "run_id": str(cell.get("run_id", ""))})
    return pd.DataFrame(rows)


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
        for run in page:
            if "bench.cell_key" in run.data.tags:
                yield run
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
