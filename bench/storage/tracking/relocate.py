"""Relocating a results directory: its MLflow store's artifact locations follow the folder.

MLflow stores artifact locations as absolute URIs when an experiment and its runs are
created, so a results directory that was copied or moved still points at the original
folder (or at nothing). :func:`relocate` rewrites every location under the old folder's
``artifacts`` to the same path under the new one, in one transaction of the sqlite store;
:func:`moved_from` says whether a store needs it. Only local sqlite stores in a results
directory are relocated (a tracking server owns its own locations).
"""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

from bench.errors import BenchError

__all__ = ["check_moved", "moved_from", "relocate"]

COLUMNS = (("experiments", "artifact_location"), ("runs", "artifact_uri"), ("logged_models", "artifact_location"))
"""Every column of MLflow's sqlite schema that holds an artifact location."""


def _root_uri(results_dir: Path) -> str:
    return (Path(results_dir).resolve() / "artifacts").as_uri()


def _connect(results_dir: Path) -> sqlite3.Connection:
    database = Path(results_dir) / "mlflow.db"
    if not database.is_file():
        raise BenchError(f"{results_dir} has no MLflow store (mlflow.db); nothing to relocate")
    from bench.storage.tracking.health import store_timeout

    return sqlite3.connect(database, timeout=store_timeout())


def moved_from(results_dir: Path) -> str | None:
    """Returns the artifacts URI the store points at when it is not this directory's, else None.

    Raises:
        BenchError: No ``mlflow.db`` in the directory.
    """
    with _connect(results_dir) as db:
        rows = db.execute("SELECT artifact_location FROM experiments WHERE name = 'privbench'").fetchall()
    if not rows or not rows[0][0]:
        return None
    current = rows[0][0].rstrip("/")
    return None if current == _root_uri(results_dir) else current


def check_moved(results_dir: Path, writing: bool) -> None:
    """Refuses to write into a copied or moved results directory that still points at the old artifacts.

    Its new runs' files would land in the old folder (or nowhere), so a writer must
    relocate it first; a reader is told so in one line and goes on. The same folder
    reached under another path (a second mount of one file system) is not a move.

    Raises:
        BenchError: ``writing``, and the store's artifacts are not this directory's.
    """
    try:
        old = moved_from(results_dir)
    except Exception:  # a store of another schema: the tracker's probe has spoken already
        return
    if old is None or _same_folder(old, Path(results_dir) / "artifacts"):
        return
    message = (f"{results_dir} was copied or moved (its runs' artifacts are still read from {old}); "
               f"run 'bench relocate --results-dir {results_dir}'")
    if writing:
        raise BenchError(f"{message} before adding runs to it")
    print(f"[bench] warning: {message}", file=sys.stderr)


def _same_folder(uri: str, folder: Path) -> bool:
    try:
        return os.path.samefile(unquote(urlparse(uri).path), folder)
    except OSError:
        return False


def relocate(results_dir: Path) -> tuple[str | None, int]:
    """Points the store's artifact locations at this directory's ``artifacts`` folder.

    Returns:
        The old artifacts URI (None when nothing had to change) and how many locations
        were rewritten.

    Raises:
        BenchError: No store, or the new ``artifacts`` folder is missing (the copy is
            incomplete: the runs' files would not be found).
        StoreDamaged: The database is damaged, or empty where runs were expected.
        StoreLocked: Another connection keeps it locked.
    """
    from bench.storage.tracking.health import StoreDamaged, check_database, store_timeout, translated

    database = Path(results_dir) / "mlflow.db"
    if database.is_file() and check_database(database, Path(results_dir)):
        raise BenchError(f"{database} is empty: there is nothing to relocate")
    try:
        return _relocate(results_dir)
    except sqlite3.Error as exc:
        error = translated(exc, str(database), store_timeout())
        raise (error if isinstance(error, BenchError) else StoreDamaged(str(database), str(exc))) from None


def _relocate(results_dir: Path) -> tuple[str | None, int]:
    old = moved_from(results_dir)
    if old is None:
        return None, 0
    new = _root_uri(results_dir)
    if not (Path(results_dir) / "artifacts").is_dir():
        raise BenchError(f"{results_dir} has no artifacts folder: copy it with the results directory "
                         f"(the store points at {unquote(urlparse(old).path)})")
    changed = 0
    with _connect(results_dir) as db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        for table, column in COLUMNS:
            if table not in tables:
                continue
            cursor = db.execute(
                f"UPDATE {table} SET {column} = ? || substr({column}, ?) WHERE {column} = ? OR {column} LIKE ? ESCAPE '\\'",
                (new, len(old) + 1, old, _like_prefix(old + "/")),
            )
            changed += cursor.rowcount
    return old, changed


def _like_prefix(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"
