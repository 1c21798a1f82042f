"""The one check of a folder or file a command will write into, made before any work starts."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from bench.errors import BenchError

NAME_MAX = 255
"""The most bytes of one path component (a file or folder name) Linux, macOS and Windows file systems allow."""


def check_path_name(flag: str, path: Path | str) -> None:
    """Checks that a path given by the user is not empty and that none of its names is over 255 bytes.

    Args:
        flag: The option that named it (``--results-dir``, ``--out``, ...), for the message.
        path: The path as given.

    Raises:
        BenchError: An empty path, or a component over :data:`NAME_MAX` bytes.
    """
    text = os.fspath(path)
    if not text.strip():
        raise BenchError(f"{flag} is empty; give a path ('.' for the current folder)")
    for part in Path(text).parts:
        size = len(os.fsencode(part))
        if size > NAME_MAX:
            raise BenchError(f"{flag} {_short(text)}: the name {_short(part)} is {size} bytes, over {NAME_MAX} bytes "
                             "(the most a file system allows); give a shorter one")


def check_writable_folder(flag: str, folder: Path) -> None:
    """Checks that a folder to write into is one this process can write, or can create; creates nothing.

    Args:
        flag: The option that named it (``--results-dir``, ``--out``, ...), for the message.
        folder: The folder.

    Raises:
        BenchError: An empty name or one over 255 bytes, the folder is a file, lies under a
            file, or can be neither written nor created (a read-only mount, a system folder).
    """
    check_path_name(flag, folder)
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise BenchError(f"{flag} {folder} is a file, not a folder (a missing folder is created)")
    existing = next(p for p in (folder.absolute(), *folder.absolute().parents) if p.exists())
    if not existing.is_dir():
        raise BenchError(f"{flag} {folder}: {existing} is a file, so no folder can be created in it")
    if not _can_write_in(existing):
        where = "" if existing == folder.absolute() else f" (nor can {folder} be created in it)"
        raise BenchError(f"{flag} {folder}: {existing} is not writable{where}")


def check_writable_file(flag: str, path: Path) -> None:
    """Checks that a file a command will write (``--out FILE``) can be written, its folder created; creates nothing.

    Args:
        flag: The option that named it.
        path: The file.

    Raises:
        BenchError: An empty name or one over 255 bytes, a folder, a read-only file, or a
            folder that can be neither written nor created.
    """
    check_path_name(flag, path)
    path = Path(path)
    if path.is_dir():
        raise BenchError(f"{flag} {path} is a folder; name a file")
    if path.exists() and not os.access(path, os.W_OK):
        raise BenchError(f"{flag} {path} cannot be written: the file is read-only")
    try:
        check_writable_folder(flag, path.parent)
    except BenchError as exc:  # name the file the user gave, not its folder
        raise BenchError(str(exc).replace(f"{flag} {path.parent}", f"{flag} {path}", 1)) from None


def _can_write_in(folder: Path) -> bool:
    """Whether this process can create entries in an existing folder.

    ``access(2)`` answers for ordinary users; root passes it everywhere but a read-only
    mount, so for root an empty folder is made and removed (the folder's times restored).
    """
    if not os.access(folder, os.W_OK | os.X_OK):
        return False
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return True
    times = folder.stat()
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".bench-probe-", dir=folder))
    except OSError:
        return False
    try:
        os.utime(folder, ns=(times.st_atime_ns, times.st_mtime_ns))
    except OSError:
        pass
    return True


def _short(text: str, keep: int = 40) -> str:
    """Returns ``text`` cut to ``keep`` characters with an ellipsis (a name of 300 bytes in a message is noise)."""
    return text if len(text) <= keep else f"{text[:keep]}..."
