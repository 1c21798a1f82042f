"""The tracking store's own state: a damaged, emptied or locked store is said as such, in one line.

Every command reaches MLflow through a :class:`~bench.storage.tracking.Tracker`, which checks a
local sqlite store before MLflow opens it (:func:`check_database`) and guards every later
call (:func:`guard`):

- a database that is not SQLite, truncated (shorter than its header says) or malformed, or
  that lacks a table of its runs (:data:`RUN_TABLES`: the tags dropped, which MLflow would
  silently create again, empty), is :class:`StoreDamaged`;
- a database that is empty (0 bytes, or no tables) where PrivBench created a store (the
  marker :func:`marker_path` it writes beside the database) or where runs' artifacts lie
  is :class:`StoreDamaged` too: MLflow would otherwise take it for a new store and every
  run would silently disappear;
- a database another connection keeps locked is waited on for :func:`store_timeout`
  seconds (:data:`STORE_TIMEOUT_S`, or ``$BENCH_STORE_TIMEOUT``), then :class:`StoreLocked`.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any, Callable

from bench.errors import BenchError

__all__ = [
    "NoResults",
    "RUN_TABLES",
    "STORE_TIMEOUT_S",
    "StoreDamaged",
    "StoreLocked",
    "check_database",
    "guard",
    "marker_path",
    "runs_in_artifacts",
    "store_timeout",
    "write_marker",
]

STORE_TIMEOUT_S = 60.0
"""Seconds a command waits for a tracking database another connection holds locked."""
TIMEOUT_ENV = "BENCH_STORE_TIMEOUT"
_SQLITE_MAGIC = b"SQLite format 3\x00"
RUN_TABLES = {"experiments": "experiment record", "tags": "tags (cell keys, result digests)", "params": "parameters",
              "metrics": "metric histories", "latest_metrics": "metrics"}
"""Tables of an MLflow store that hold what its runs are (beside ``runs``), and what each holds."""
_DAMAGE = ("malformed", "not a database", "no such table", "no such column", "unable to open", "disk i/o error",
           "file is encrypted")


class NoResults(BenchError):
    """There is no results database (missing, or an empty file where no runs were expected)."""


class StoreDamaged(BenchError):
    """The tracking store cannot be read as the store it was: damaged, emptied or its artifacts gone."""

    def __init__(self, where: str, why: str):
        super().__init__(f"the tracking store is damaged: {where}: {why}")


class StoreLocked(BenchError):
    """Another connection kept the tracking database locked for longer than :func:`store_timeout`."""

    def __init__(self, where: str, waited: float):
        super().__init__(f"the tracking store is locked: {where} stayed locked by another connection for "
                         f"{waited:g} s (${TIMEOUT_ENV} sets how long to wait); retry once that process is done")


def store_timeout() -> float:
    """Returns how long to wait for a locked store: ``$BENCH_STORE_TIMEOUT`` seconds, else :data:`STORE_TIMEOUT_S`.

    Raises:
        BenchError: ``$BENCH_STORE_TIMEOUT`` is not a positive number.
    """
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    if not text:
        return STORE_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < 86400:
        raise BenchError(f"${TIMEOUT_ENV} must be a number of seconds in (0, 86400), got {text!r}")
    return value


def marker_path(database: Path) -> Path:
    """Returns the marker PrivBench writes beside a sqlite store it created (``.mlflow.db.privbench``)."""
    return Path(database).with_name(f".{Path(database).name}.privbench")


def write_marker(database: Path) -> None:
    """Records beside a store that it holds PrivBench's runs (an emptied database is then refused, not re-created)."""
    marker = marker_path(database)
    if marker.exists():
        return
    try:
        marker.write_text(json.dumps({"database": Path(database).name,
                                      "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")})
                          + "\n", encoding="utf-8")
    except OSError:
        pass  # a read-only folder: the artifacts still tell that runs were expected


def runs_in_artifacts(results_dir: Path) -> int:
    """Returns how many runs' artifact folders (``artifacts/<run id>/artifacts``) a results directory holds."""
    root = Path(results_dir) / "artifacts"
    try:
        return sum(1 for run in root.iterdir() if (run / "artifacts").is_dir())
    except OSError:
        return 0


def _header_problem(database: Path, size: int) -> str | None:
    """Returns why a non-empty file cannot be the sqlite database it was, from its header, or None."""
    with open(database, "rb") as f:
        header = f.read(100)
    if not header.startswith(_SQLITE_MAGIC):
        return "not an SQLite database (overwritten?)"
    if len(header) < 100:
        return f"truncated to {size} bytes"
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    counted = header[24:28] == header[92:96]  # the header's page count is valid only then
    journals = any(Path(f"{database}{suffix}").exists() for suffix in ("-journal", "-wal"))
    if counted and pages and not journals and size < pages * page_size:
        return f"truncated: {size} bytes where its header records {pages * page_size}"
    return None


def check_database(database: Path, results_dir: Path) -> bool:
    """Checks an existing sqlite tracking database before MLflow opens it; returns whether it is empty.

    Empty means 0 bytes or no tables: MLflow would create a new store in it. Where runs were
    expected (PrivBench's marker beside it, or runs' artifacts in ``results_dir``) that is
    damage, not a new store.

    Raises:
        StoreDamaged: Not SQLite, truncated, malformed, missing a table of its runs (the tags
            dropped), or emptied where runs were expected.
        StoreLocked: Another connection kept it locked for :func:`store_timeout` seconds.
    """
    where = str(database)
    size = database.stat().st_size
    problem = _header_problem(database, size) if size else None
    if problem:
        raise StoreDamaged(where, problem)
    tables: set[str] = set()
    if size:
        timeout = store_timeout()
        mode = "rw" if os.access(database, os.W_OK) else "ro"
        try:
            db = sqlite3.connect(f"{database.resolve().as_uri()}?mode={mode}", uri=True, timeout=timeout)
            try:
                tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            finally:
                db.close()
        except sqlite3.Error as exc:
            raise translated(exc, where, timeout) from None
    lost = [name for name in RUN_TABLES if name not in tables] if "runs" in tables else []
    if lost:  # MLflow would create them again, empty: every run would silently lose what they held
        raise StoreDamaged(where, f"its {', '.join(lost)} table{'s are' if len(lost) > 1 else ' is'} missing "
                                  f"(dropped?): what it held, the runs' {', '.join(RUN_TABLES[name] for name in lost)}, "
                                  "is gone; "
                                  "restore it from a backup, or move the results directory away to start a new one")
    if tables:
        return False
    runs = runs_in_artifacts(results_dir)
    if marker_path(database).exists() or runs:
        state = "0 bytes" if not size else "no tables"
        evidence = (f"artifacts of {runs} run(s) are in {Path(results_dir) / 'artifacts'}" if runs
                    else f"PrivBench created a store there ({marker_path(database).name})")
        raise StoreDamaged(where, f"the database is empty ({state}) but {evidence}; restore it from a backup, or "
                                  "move the results directory away to start a new one")
    return True


def _sqlite_error(exc: BaseException) -> sqlite3.Error | None:
    """Returns the sqlite3 error behind an exception (MLflow and SQLAlchemy wrap it), or None."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, sqlite3.Error):
            return current
        orig = getattr(current, "orig", None)
        if isinstance(orig, sqlite3.Error):
            return orig
        current = current.__cause__ or current.__context__
    return None


def store_problem(exc: BaseException) -> str | None:
    """Returns ``locked`` or ``damaged`` for an error the sqlite store raised, else None."""
    error = _sqlite_error(exc)
    if error is None:
        return None
    text = str(error).lower()
    if isinstance(error, sqlite3.OperationalError) and ("locked" in text or "busy" in text):
        return "locked"
    if isinstance(error, sqlite3.DatabaseError) and any(d in text for d in _DAMAGE):
        return "damaged"
    return None


def translated(exc: BaseException, where: str, waited: float) -> BaseException:
    """Returns a store error as :class:`StoreLocked` or :class:`StoreDamaged`, or ``exc`` itself when it is neither."""
    kind = store_problem(exc)
    if kind == "locked":
        return StoreLocked(where, waited)
    if kind == "damaged":
        return StoreDamaged(where, " ".join(str(_sqlite_error(exc)).split())[:300])
    return exc


class _Guarded:
    """An MLflow client whose store errors are one line: locked calls retried until the timeout, then said."""

    def __init__(self, client: Any, where: str):
        self._client = client
        self._where = where

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_client", "_where"):  # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        attr = getattr(self._client, name)
        if not callable(attr) or name.startswith("_"):
            return attr
        return self._wrap(attr)

    def _wrap(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            timeout = store_timeout()
            deadline = time.monotonic() + timeout
            while True:
                try:
                    return method(*args, **kwargs)
                except BenchError:
                    raise
                except Exception as exc:
                    kind = store_problem(exc)
                    if kind == "locked" and time.monotonic() < deadline:
                        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
                        continue  # a failed statement was rolled back: the call can be made again
                    if kind is None:
                        raise
                    raise translated(exc, self._where, timeout) from None

        call.__name__ = getattr(method, "__name__", "call")
        call.__doc__ = getattr(method, "__doc__", None)
        return call


def guard(client: Any, where: str) -> Any:
    """Returns ``client`` with its sqlite store's lock waits bounded and its store errors as one line.

    MLflow waits 20 s on each locked statement; on a sqlite store that wait becomes
    :func:`store_timeout`, and a call still locked after it raises :class:`StoreLocked`
    (a damaged database :class:`StoreDamaged`) instead of MLflow's traceback.
    """
    _bound_busy_wait(client)
    return _Guarded(client, where)


def _bound_busy_wait(client: Any) -> None:
    """Replaces MLflow's fixed ``PRAGMA busy_timeout = 20000`` by :func:`store_timeout` on the client's engine."""
    try:
        engine = client._tracking_client.store.engine
        from sqlalchemy import event
    except Exception:  # not a SQLAlchemy store (a server): its own timeouts apply
        return
    if getattr(engine, "_privbench_busy_wait", False):
        return

    def bounded(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("PRAGMA BUSY_TIMEOUT"):
            statement = f"PRAGMA busy_timeout = {int(store_timeout() * 1000)};"
        return statement, parameters

    event.listen(engine, "before_cursor_execute", bounded, retval=True)
    engine._privbench_busy_wait = True
