"""Reproduction records: what ``bench leaderboard verify`` recomputed of an entry, kept beside it.

An entry file states numbers; its digests (:mod:`leaderboard.verification`) only tell an
entry edited after it was written, since anyone can compute them. An entry is
**reproduced** when ``bench leaderboard verify`` recomputed a sample of its cells on the
maintainer's machine and every one matched (:mod:`leaderboard.reproduce`). The verdict is
written to ``<entry stem>.reproduced`` (JSON) beside the entry file, which the maintainer
commits with it: the date, the code version, the hardware, the sample and each cell's
differences. The record names the SHA-256 of the entry file's bytes, so an entry edited
after it was reproduced (a forged number, a recomputed digest) is no longer reproduced.

The project's own baselines (``leaderboard/entries``, computed by the maintainers' grid,
``benchmarks/baselines.sh``) are pinned instead: ``BASELINES.sha256`` in their folder lists the
SHA-256 of each baseline file as the maintainers committed it (``sha256sum`` format), so an
edited baseline (a forged number with its digests recomputed) no longer counts as one.

The board ranks reproduced entries and pinned baselines (and the local suites' cells, which
the user computed); an entry file with neither is *self-reported*: listed after the ranked
entries, marked, never ranked. Records and pins are the maintainers' to write: a pull request
that adds an entry carries neither.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

__all__ = ["BASELINES_FILE", "RECORD_SUFFIX", "Reproduction", "SELF_REPORTED", "pinned_baselines", "read_record",
           "record_path", "reproduction_of", "write_pins", "write_record"]

BASELINES_FILE = "BASELINES.sha256"
"""The file, in an entries folder, that pins the project's baselines by SHA-256 (``sha256sum`` format)."""
RECORD_SUFFIX = ".reproduced"
"""The suffix of a reproduction record (JSON) beside ``<stem>.json`` (not ``.json``: entry folders are globbed for those)."""
SCHEMA = 1
SELF_REPORTED = "self-reported: not reproduced"
"""The status of an entry file without a valid reproduction record (never ranked)."""


@dataclass(frozen=True)
class Reproduction:
    """Whether an entry file is reproduced, and by what.

    Attributes:
        reproduced: A record matches the entry file and every sampled cell matched.
        text: One line: ``reproduced: 2 of 27 cells on AMD EPYC (AVX512), 2 threads, 2026-12-02
            (code 1a2b3c4)`` or why not (``self-reported: not reproduced (no record)``).
    """

    reproduced: bool
    text: str


def record_path(entry_path: str | Path) -> Path:
    """Returns where the reproduction record of an entry file lies (``<stem>.reproduced`` beside it)."""
    path = Path(entry_path)
    return path.with_name(path.stem + RECORD_SUFFIX)


def file_sha256(path: str | Path) -> str:
    """Returns the SHA-256 of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def write_record(entry_path: str | Path, entry: Mapping[str, Any], checks: Sequence[Any], *, sample_seed: int,
                 hardware: Mapping[str, str], code: Mapping[str, str], seconds: float) -> Path:
    """Writes the reproduction record of a verify run beside the entry file (atomically).

    Args:
        entry_path: The entry file.
        entry: Its content.
        checks: One :class:`leaderboard.reproduce.CellCheck` per recomputed cell.
        sample_seed: The seed of the sample.
        hardware: What recomputed them (CPU model, instruction set, threads, or GPU; torch).
        code: The harness's version (``git_sha``, ``privbench``).
        seconds: Wall time of the recomputation.

    Returns:
        The record's path.
    """
    entry_path = Path(entry_path)
    matched = bool(checks) and all(c.status == "match" for c in checks)
    record = {
        "schema": SCHEMA,
        "entry": str(entry.get("name")),
        "entry_file": entry_path.name,
        "entry_sha256": file_sha256(entry_path),
        "verified_at": datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
        "code": dict(code),
        "hardware": dict(hardware),
        "sample": {"cells": len(checks), "of": len(entry.get("cells") or []), "seed": sample_seed},
        "seconds": round(seconds, 1),
        "verdict": "reproduced" if matched else "mismatch",
        "cells": [{"cell_key": c.cell_key, "label": c.label, "status": c.status, "tolerance": c.tolerance,
                   "compared": c.compared, "uncompared": c.uncompared, "differences": list(c.differences)}
                  for c in checks],
    }
    target = record_path(entry_path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(record, handle, indent=1, sort_keys=True)
            handle.write("\n")
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def read_record(entry_path: str | Path) -> Reproduction:
    """Reads an entry file's reproduction record and checks it against the file.

    Args:
        entry_path: The entry file.

    Returns:
        Reproduced only when the record is readable, names this file's SHA-256, says
        ``reproduced`` and lists at least one recomputed cell, every one ``match``.
    """
    path = record_path(entry_path)
    if not path.is_file():
        return Reproduction(False, f"{SELF_REPORTED} (no record of 'bench leaderboard verify')")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        digest, cells = record["entry_sha256"], record["cells"]
        verdict, when = record["verdict"], str(record.get("verified_at", ""))[:10]
    except (OSError, ValueError, KeyError, TypeError):
        return Reproduction(False, f"{SELF_REPORTED} ({path.name} is not a reproduction record)")
    if digest != file_sha256(entry_path):
        return Reproduction(False, f"{SELF_REPORTED} (the entry file changed after it was reproduced on {when})")
    if verdict != "reproduced" or not cells or any(not isinstance(c, dict) or c.get("status") != "match"
                                                   for c in cells):
        return Reproduction(False, f"{SELF_REPORTED} (its recomputation on {when} did not match)")
    hardware = record.get("hardware") or {}
    machine = hardware.get("label") or hardware.get("cpu") or hardware.get("gpu") or "unknown hardware"
    code = str((record.get("code") or {}).get("git_sha", "unknown"))[:12]
    sample = record.get("sample") or {}
    return Reproduction(True, f"reproduced: {len(cells)} of {sample.get('of', '?')} cells on {machine}, {when} "
                              f"(code {code})")


def pinned_baselines(folder: str | Path) -> dict[str, str]:
    """Returns file name -> SHA-256 of the baselines pinned in a folder's :data:`BASELINES_FILE` ({} without one)."""
    path = Path(folder) / BASELINES_FILE
    if not path.is_file():
        return {}
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) == 2 and len(parts[0]) == 64:
            pins[parts[1].lstrip("*")] = parts[0]
    return pins


def write_pins(folder: str | Path, names: Sequence[str]) -> Path:
    """Pins entry files of a folder as the project's baselines (the maintainers' act; ``sha256sum`` format).

    Args:
        folder: The entries folder.
        names: The entry files' names in it.

    Returns:
        The :data:`BASELINES_FILE` written.
    """
    folder = Path(folder)
    lines = [f"{file_sha256(folder / name)}  {name}" for name in sorted(names)]
    target = folder / BASELINES_FILE
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return target


def reproduction_of(entry_path: str | Path) -> Reproduction:
    """Returns whether an entry file is a pinned baseline or reproduced, and in words.

    Args:
        entry_path: The entry file.
    """
    path = Path(entry_path)
    pin = pinned_baselines(path.parent).get(path.name)
    if pin is not None:
        if pin == file_sha256(path):
            return Reproduction(True, "project baseline (computed by the maintainers' grid, pinned in "
                                      f"{BASELINES_FILE})")
        return Reproduction(False, f"{SELF_REPORTED} (the file differs from the baseline pinned in {BASELINES_FILE})")
    return read_record(path)
