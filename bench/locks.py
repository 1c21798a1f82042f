"""Inter-process file locks."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator


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
    """Whether a process with this id exists on this host."""
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
