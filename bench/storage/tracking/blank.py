"""A blank MLflow sqlite store, migrated once per process and copied for every new store after.

MLflow creates a sqlite store by running its schema migrations, about 3 s each time; a process
that opens many new results directories (a test session, a script looping over folders) pays
that once. The copy is the store MLflow made in this process, taken before PrivBench created
its experiment in it, so it holds MLflow's schema and default experiment only.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

_BLANK: list[bytes] = []


def remember(database: Path) -> None:
    """Keeps a copy of ``database``, a store MLflow has just created, as this process's blank store."""
    if _BLANK:
        return
    source, memory = sqlite3.connect(database), sqlite3.connect(":memory:")
    try:
        source.backup(memory)
        _BLANK.append(memory.serialize())
    finally:
        source.close()
        memory.close()


def restore(database: Path) -> bool:
    """Writes this process's blank store at ``database`` atomically.

    Returns:
        False when there is no blank store yet or it cannot be written (MLflow then creates the
        store and says why it cannot, in the tracker's one line).
    """
    if not _BLANK:
        return False
    partial = database.with_name(f".{database.name}.{os.getpid()}.blank")
    try:
        with open(partial, "wb") as f:
            f.write(_BLANK[0])
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, database)
        return True
    except OSError:
        return False
    finally:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
