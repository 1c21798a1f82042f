"""What a cache directory holds that PrivBench wrote, recognised by name and layout, and nothing else.

The cache (:mod:`bench.storage.cache`) writes only these, and maintenance removes only these:

- an *entry*: ``<root>/<kind>/<key>/`` (``kind`` one or more folders deep) holding a
  ``MANIFEST.json`` of PrivBench's form (a JSON object with ``format``, ``kind``, ``key``
  and ``files``);
- a *temporary*: a folder ``.<key>.<host>.<pid>.<8 hex>.tmp`` (an entry being written) or
  ``.<name>.<pid>.<8 hex>.removed.tmp`` (an entry being removed);
- a *lock*: ``<kind>/.<key>.lock`` (an entry's build lock) or ``<root>/locks/<key>.lock``
  (a cell's lock).

Anything else under a cache directory (a user's files, a folder that was pointed at by
mistake, a symbolic link) is *foreign*: listed by ``bench cache verify|clean`` as not
PrivBench's, and never removed, whatever its name or age.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from bench.storage.locks import pid_alive

MANIFEST = "MANIFEST.json"
FORMAT = 1
STALE_TMP_S = 24 * 3600.0
"""A temporary entry of another host older than this is taken to be left by a dead process."""
CELL_LOCKS = "locks"
"""The folder of cell locks under a cache directory (:func:`bench.cell.once.cell_locks`)."""

_WRITING = re.compile(r"^\.(?P<key>[^./][^/]*?)\.(?P<host>[^/]+)\.(?P<pid>\d+)\.(?P<tag>[0-9a-f]{8})\.tmp$")
_REMOVING = re.compile(r"^\.(?P<key>[^/]+)\.(?P<pid>\d+)\.(?P<tag>[0-9a-f]{8})\.removed\.tmp$")


@dataclass(frozen=True)
class Temporary:
    """The owner of a temporary folder, read from its name.

    Attributes:
        host: The host of the writing process ("" for a folder being removed: any host may sweep it).
        pid: Its process id.
        removing: Whether it is an entry being removed (always safe to finish removing).
    """

    host: str
    pid: int
    removing: bool


@dataclass
class Survey:
    """A cache directory sorted into what PrivBench wrote and what it did not.

    Attributes:
        entries: PrivBench's entry folders (verified or not).
        stale: PrivBench's temporaries left by dead processes (safe to remove).
        busy: PrivBench's temporaries of processes that may still be writing (left alone).
        foreign: Files, folders and links that are not PrivBench's (never removed).
    """

    entries: list[Path] = field(default_factory=list)
    stale: list[Path] = field(default_factory=list)
    busy: list[Path] = field(default_factory=list)
    foreign: list[Path] = field(default_factory=list)


def writing_name(key: str) -> str:
    """Returns the name of the temporary folder an entry ``key`` is written into by this process."""
    return f".{key}.{socket.gethostname()}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"


def removing_name(name: str) -> str:
    """Returns the name an entry folder ``name`` is renamed to while it is removed."""
    return f".{name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.removed.tmp"


def parse_temporary(name: str) -> Temporary | None:
    """Returns the owner of a temporary folder's name, or None when the name is not one the cache writes."""
    found = _REMOVING.match(name)
    if found:
        return Temporary("", int(found["pid"]), True)
    found = _WRITING.match(name)
    if found:
        return Temporary(found["host"], int(found["pid"]), False)
    return None


def is_stale(path: Path, owner: Temporary, now: float | None = None) -> bool:
    """Whether a temporary was left by a dead process: this host's dead pid, another host's after a day."""
    if owner.removing:
        return True
    if owner.host == socket.gethostname() and not pid_alive(owner.pid):
        return True
    try:
        return (now if now is not None else time.time()) - path.lstat().st_mtime > STALE_TMP_S
    except FileNotFoundError:
        return False


def own_manifest(folder: Path) -> dict | None:
    """Returns the manifest of a folder when it is PrivBench's (an object with format, kind, key, files), else None."""
    path = folder / MANIFEST
    if path.is_symlink() or not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict):
        return None
    shapes = (("format", int), ("kind", str), ("key", str), ("files", dict))
    return manifest if all(isinstance(manifest.get(name), kind) for name, kind in shapes) else None


def is_own_lock(path: Path, root: Path) -> bool:
    """Whether a file is one of the cache's locks: ``<kind>/.<key>.lock`` or ``<root>/locks/<key>.lock``."""
    if not path.name.endswith(".lock") or path.is_symlink():
        return False
    return (path.name.startswith(".") and len(path.name) > len("..lock")) or path.parent == root / CELL_LOCKS


def survey(root: Path) -> Survey:
    """Sorts what a cache directory holds (symbolic links are never followed).

    Args:
        root: The cache directory (missing: an empty survey).

    Returns:
        The entries (folders at least two deep holding a manifest of PrivBench's form),
        temporaries (stale or busy), and everything foreign; the locks are left out.
    """
    found = Survey()
    now = time.time()

    def walk(folder: Path, depth: int) -> None:
        try:
            children = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            found.foreign.append(folder)
            return
        for child in children:
            path = Path(child.path)
            if child.is_symlink():
                found.foreign.append(path)
            elif child.is_dir():
                owner = parse_temporary(child.name)
                if owner is not None:
                    (found.stale if is_stale(path, owner, now) else found.busy).append(path)
                elif depth >= 1 and own_manifest(path) is not None:
                    found.entries.append(path)
                else:
                    walk(path, depth + 1)
            elif not is_own_lock(path, root):
                found.foreign.append(path)

    if root.is_dir() and not root.is_symlink():
        walk(root, 0)
    return found


def remove_entry(path: Path) -> None:
    """Removes an entry's folder (readers holding mapped files keep their data)."""
    trash = path.parent / removing_name(path.name)
    with contextlib.suppress(FileNotFoundError):
        os.rename(path, trash)
        shutil.rmtree(trash, ignore_errors=True)


def remove_temporary(path: Path) -> None:
    """Removes one of the cache's temporary folders (never a link: only the link would go)."""
    if path.is_symlink() or not path.is_dir():
        return
    shutil.rmtree(path, ignore_errors=True)


def remove_stale_temporaries(root: Path) -> list[Path]:
    """Removes temporaries left by killed processes: this host's dead pids, other hosts' after a day.

    Only folders named as the cache names its temporaries (:func:`writing_name`,
    :func:`removing_name`) are touched; any other name, however it ends, is left alone.
    """
    removed: list[Path] = []
    if not root.is_dir():
        return removed
    now = time.time()
    for tmp in root.rglob(".*.tmp"):
        owner = parse_temporary(tmp.name)
        if owner is None or tmp.is_symlink() or not tmp.is_dir():
            continue
        if is_stale(tmp, owner, now):
            remove_temporary(tmp)
            removed.append(tmp)
    return removed
