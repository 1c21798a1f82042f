"""Inter-process file locks."""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Iterator
from urllib.parse import unquote, urlsplit

DEFAULT_DATABASE = "mlflow.db"
"""The name of the sqlite database a results directory holds (see :func:`bench.storage.tracking.tracking_uri`)."""


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Holds an exclusive POSIX lock on ``path`` (created if missing; released when the process dies)."""
    try:
        import fcntl
    except ImportError:  # no POSIX locks: a grid still never logs a cell twice itself
        yield
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a")
    except OSError as exc:
        from bench.errors import BenchError

        raise BenchError(f"cannot take the lock {path}: {exc.strerror or exc}") from None
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def lock_is_free(path: Path) -> bool:
    """Whether nobody holds the lock at ``path`` right now (a missing file is a free lock)."""
    try:
        import fcntl
    except ImportError:
        return False
    if not path.exists():
        return True
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(handle, fcntl.LOCK_UN)
        return True


def pid_alive(pid: int) -> bool:
    """Whether a process with this id runs on this host (a zombie, ended but not yet reaped, does not).

    A worker killed with its parent is re-parented; when its new parent is a subreaper that
    does not reap it (a test runner once Ray has run in it), it stays a zombie that
    ``kill(pid, 0)`` still finds.
    """
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc: the signal probe is all there is
    return stat[stat.rindex(")") + 2 :][:1] not in ("Z", "X")


def store_lock_folder(uri: str) -> Path:
    """Returns the folder of the cell locks of one tracking store, derived from the store's identity.

    Any two processes on this machine that write one store get one folder, whatever their
    caches or results directories:

    - a sqlite store: ``locks/`` beside its database (``<results>/locks`` for the default
      ``<results>/mlflow.db``; ``locks/<database name>/`` for another database file);
    - any other store (a server, a database, a folder of MLflow files): a folder of this
      user's in the temporary directory named by a digest of the store's normalised URI.
      Processes on other machines writing the same server do not share it.

    Args:
        uri: The store's tracking URI (:attr:`bench.storage.tracking.Tracker.uri`).
    """
    if uri.startswith("sqlite:///"):
        database = Path(unquote(uri[len("sqlite:///"):].partition("?")[0])).resolve()
        folder = database.parent / "locks"
        return folder if database.name == DEFAULT_DATABASE else folder / database.name
    digest = hashlib.sha256(_store_identity(uri).encode()).hexdigest()[:20]
    user = getattr(os, "getuid", lambda: "user")()
    return Path(tempfile.gettempdir()) / f"privbench-locks-{user}" / digest


def _store_identity(uri: str) -> str:
    """A non-sqlite URI written the same way however it was given (a local folder: its resolved path)."""
    parts = urlsplit(uri)
    if parts.scheme in ("", "file"):
        return "file:" + str(Path(unquote(parts.path) or ".").resolve())
    netloc = parts.netloc.rsplit("@", 1)[-1].lower()  # the store, not who logs in to it
    return f"{parts.scheme.lower()}://{netloc}{parts.path.rstrip('/')}" + (f"?{parts.query}" if parts.query else "")
