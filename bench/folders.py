"""The one check of a folder a command will write into, made before any work starts."""

from __future__ import annotations

import os
from pathlib import Path

from bench.errors import BenchError


def check_writable_folder(flag: str, folder: Path) -> None:
    """Checks that a folder to write into is one this process can write, or can create; creates nothing.

    Args:
        flag: The option that named it (``--results-dir``, ``--out``, ...), for the message.
        folder: The folder.

    Raises:
        BenchError: The folder is a file, lies under a file, or can be neither written
            nor created (a read-only mount, say).
    """
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise BenchError(f"{flag} {folder} is a file, not a folder (a missing folder is created)")
    existing = next(p for p in (folder.absolute(), *folder.absolute().parents) if p.exists())
    if not existing.is_dir():
        raise BenchError(f"{flag} {folder}: {existing} is a file, so no folder can be created in it")
    if not os.access(existing, os.W_OK | os.X_OK):
        where = "" if existing == folder.absolute() else f" (nor can {folder} be created in it)"
        raise BenchError(f"{flag} {folder}: {existing} is not writable{where}")
