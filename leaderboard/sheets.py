"""Sample sheets that travel with submitted entries: written by ``bench submit``, checked by the board.

A submitted mechanism's runs live in the submitter's tracking store, which the board
never sees, so ``bench submit`` copies one of its runs' ``samples.png`` beside the entry
file (``<entry stem>.png``) and records its name and SHA-256 in the entry
(:data:`SHEET_FIELD`). ``bench leaderboard build`` shows it on the mechanism's page only
when the file is there and hashes to the recorded digest.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

if TYPE_CHECKING:
    from bench.storage.tracking import Tracker

__all__ = ["SHEET_FIELD", "entry_sheets", "run_sheet", "write_entry_sheet"]

SHEET_FIELD = "sample_sheet"
"""The entry key of its sample sheet: ``{"file": "<stem>.png", "sha256": "<hex>"}``."""
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run_sheet(tracker: "Tracker", run_ids: Iterable[str]) -> bytes | None:
    """Returns the ``samples.png`` of the first of these runs that logged one (None when none did).

    Args:
        tracker: The store the runs are in.
        run_ids: MLflow run ids, in order of preference.
    """
    from leaderboard.store import _artifact

    for run_id in run_ids:
        try:
            run = tracker.client.get_run(run_id)
        except Exception:  # a run deleted meanwhile: try the next
            continue
        data = _artifact(tracker, run, "samples.png", binary=True)
        if data:
            return data
    return None


def write_entry_sheet(data: bytes, entry_path: Path) -> dict[str, str]:
    """Writes a sample sheet beside an entry file and returns what the entry records of it.

    Args:
        data: The PNG.
        entry_path: The entry's JSON file (the sheet is its stem with ``.png``).

    Returns:
        ``{"file": <file name>, "sha256": <hex digest>}`` (:data:`SHEET_FIELD`'s value).
    """
    path = entry_path.with_suffix(".png")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return {"file": path.name, "sha256": hashlib.sha256(data).hexdigest()}


def _sheet_problem(folder: Path, record: Any) -> tuple[Path | None, str]:
    """Returns (its path, "") when the record names a PNG beside the entry with that digest, else (None, why)."""
    if not isinstance(record, Mapping) or not isinstance(record.get("file"), str):
        return None, "its sample_sheet record names no file"
    name = record["file"]
    if Path(name).name != name or not name.lower().endswith(".png"):
        return None, f"its sample sheet {name!r} is not a PNG file name beside the entry"
    path = folder / name
    if not path.is_file():
        return None, f"its sample sheet {name} is missing"
    data = path.read_bytes()
    if not data.startswith(PNG_MAGIC):
        return None, f"its sample sheet {name} is not a PNG"
    if hashlib.sha256(data).hexdigest() != record.get("sha256"):
        return None, f"its sample sheet {name} does not match the digest the entry records"
    return path, ""


def entry_sheets(folder: str | Path) -> tuple[dict[str, Path], list[str]]:
    """Returns the verified sample sheets of the entries in a folder, and a note per sheet left out.

    Args:
        folder: The entries folder (``*.json`` entry files; a missing folder has none).

    Returns:
        ``(mechanism -> sheet path, notes)``: the first entry of each mechanism (by file
        name) with a verified sheet; each note says which entry's sheet was not shown and why.
    """
    sheets: dict[str, Path] = {}
    notes: list[str] = []
    folder = Path(folder)
    if not folder.is_dir():
        return sheets, notes
    for path in sorted(folder.glob("*.json")):
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            continue  # reading the entries says what is wrong with the file
        if not isinstance(entry, dict) or SHEET_FIELD not in entry:
            continue
        sheet, problem = _sheet_problem(folder, entry[SHEET_FIELD])
        if problem:
            notes.append(f"entry {path.name}: {problem}; its mechanism's page shows no samples")
        elif str(entry.get("mechanism")) not in sheets:
            sheets[str(entry.get("mechanism"))] = sheet
    return sheets, notes
