"""The one door to every on-disk cache: entries verified by key and checksum, written atomically.

Datasets, releases, trained models and fitted mechanism state are cached as *entries*::

    <cache_dir>/<kind>/<key>/          an entry: payload files + MANIFEST.json
    <cache_dir>/<kind>/.<key>.lock     held while the entry is built (one builder at a time)

An entry is written into a temporary folder (``.<key>.<host>.<pid>.<random>.tmp``) and
renamed into place, so a reader never sees a half-written entry and a kill leaves only a
temporary folder, removed by the next process that opens the cache. Files are not synced
to disk: after a power cut an entry may hold damaged bytes, which verification catches. ``MANIFEST.json``
records the entry's kind and content key and, per file, its size and xxh3-128 checksum.
Reading an entry compares the key and verifies every file (once per process per entry, so
a hit stays cheap); a mismatch, a truncated or unreadable file is reported in one line,
removed and rebuilt, never used. A write that fills the file system leaves nothing behind and
ends in one line naming the cache folder. Maintenance (``bench cache clean``) removes only what
:mod:`bench.storage.cache_layout` recognises as the cache's own. Objects are stored with ``torch.save`` and read with
``weights_only=True``: tensors and plain containers only, never code.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from bench.errors import BenchError
from bench.storage.cache_layout import (  # noqa: F401 (MANIFEST, STALE_TMP_S, remove_*: their home was here)
    FORMAT,
    MANIFEST,
    STALE_TMP_S,
    remove_entry,
    remove_stale_temporaries,
    survey,
    writing_name,
)
from bench.storage.locks import file_lock

OBJECT_FILE = "object.pt"
CHUNK = 1 << 23
NO_SPACE_TEXTS = ("no space left", "unexpected pos", "file write failed", "disk quota exceeded")
"""Words of an error that a full file system causes where no errno says so (torch's zip writer, Arrow)."""

_verified: dict[tuple[str, int, int], bool] = {}
_swept: set[str] = set()


class DamagedEntry(Exception):
    """An entry that must not be used (the message says why)."""


@dataclass(frozen=True)
class EntryInfo:
    """One entry found in a cache directory.

    Attributes:
        kind: Its kind (``releases``, ``models``, ``datasets/synth_faces``, ...).
        key: Its content key (the folder name).
        path: Its folder.
        size: Total bytes of its files.
        describe: What it holds, in words (from its manifest).
    """

    kind: str
    key: str
    path: Path
    size: int
    describe: str = ""


def checksum(path: Path) -> str:
    """Returns the xxh3-128 hex digest of a file's bytes, read in chunks."""
    import xxhash

    h = xxhash.xxh3_128()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def warn(message: str) -> None:
    """Prints one warning line on stderr."""
    print(f"bench: warning: {' '.join(message.split())}", file=sys.stderr, flush=True)


class Cache:
    """A cache directory of verified entries.

    Args:
        root: The cache directory (created on first write).
        sweep: Remove temporaries left by killed processes (once per process and directory);
            False leaves the directory as it is (``bench cache verify``).
    """

    def __init__(self, root: str | Path, sweep: bool = True):
        self.root = Path(root)
        if sweep and str(self.root) not in _swept:
            _swept.add(str(self.root))
            remove_stale_temporaries(self.root)

    def entry_path(self, kind: str, key: str) -> Path:
        """Returns the folder of an entry (whether or not it exists)."""
        _check_name(kind, key)
        return self.root / kind / key

    # --- reading ---------------------------------------------------------------------------

    def open(self, kind: str, key: str) -> Path | None:
        """Returns the folder of a verified entry, or None when it is absent or was damaged.

        A damaged entry is reported in one line and removed.
        """
        path = self.entry_path(kind, key)
        if not path.exists():
            return None
        try:
            verify_entry(path, kind, key)
        except DamagedEntry as exc:
            warn(f"cache entry {kind}/{key[:12]} is damaged ({exc}); it is removed and rebuilt")
            remove_entry(path)
            return None
        return path

    def load(self, kind: str, key: str) -> Any | None:
        """Returns the object stored in a verified entry, or None (absent or damaged)."""
        path = self.open(kind, key)
        if path is None:
            return None
        try:
            return _read_object(path / OBJECT_FILE)
        except Exception as exc:  # torch raises many kinds for a payload it cannot read
            warn(f"cache entry {kind}/{key[:12]} is damaged (unreadable: {type(exc).__name__}); it is removed and rebuilt")
            remove_entry(path)
            return None

    # --- writing ---------------------------------------------------------------------------

    def write(self, kind: str, key: str, fill: Callable[[Path], None], describe: str = "") -> Path:
        """Writes an entry atomically: ``fill(folder)`` writes its files, then it is renamed into place.

        Returns:
            The entry's folder. When another process committed the same entry first, its
            entry is kept and this one discarded.

        Raises:
            BenchError: The file system is full (:func:`is_no_space`); the half-written
                entry is removed first.
        """
        final = self.entry_path(kind, key)
        tmp = final.parent / writing_name(key)
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            tmp.mkdir()
            fill(tmp)
            files = {}
            for file in sorted(p for p in tmp.rglob("*") if p.is_file()):
                rel = file.relative_to(tmp).as_posix()
                files[rel] = {"size": file.stat().st_size, "xxh3_128": checksum(file)}
            manifest = {"format": FORMAT, "kind": kind, "key": key, "describe": describe,
                        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "files": files}
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
            if final.exists():
                remove_entry(final)
            try:
                os.rename(tmp, final)
            except OSError:
                if not final.exists():
                    raise
                shutil.rmtree(tmp, ignore_errors=True)  # another process committed it first
        except BaseException as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            if is_no_space(exc):
                raise BenchError(f"no space left on the cache folder {self.root} while writing {kind}/{key[:12]} "
                                 "(nothing of it kept); free space there or pass another --cache-dir") from None
            raise
        _verified[_stamp(final)] = True
        return final

    def save(self, kind: str, key: str, obj: Any, describe: str = "") -> None:
        """Stores tensors in plain containers as an entry."""
        import torch

        self.write(kind, key, lambda folder: torch.save(obj, folder / OBJECT_FILE), describe)

    def get_or_build(self, kind: str, key: str, build: Callable[[], Any], describe: str = "") -> tuple[Any, bool]:
        """Returns (object, whether it came from the cache), building and storing it once.

        The build holds the entry's lock, so concurrent processes build it once.
        """
        found = self.load(kind, key)
        if found is not None:
            return found, True
        with self.lock(kind, key):
            found = self.load(kind, key)
            if found is not None:
                return found, True
            obj = build()
            self.save(kind, key, obj, describe)
            return obj, False

    def get_or_write(self, kind: str, key: str, fill: Callable[[Path], None], describe: str = "") -> tuple[Path, bool]:
        """Returns (the folder of a verified entry, whether it was cached), writing it once with ``fill``.

        For entries of many files (Arrow shards); ``fill(folder)`` writes them. The write
        holds the entry's lock, so concurrent processes write it once.
        """
        found = self.open(kind, key)
        if found is not None:
            return found, True
        with self.lock(kind, key):
            found = self.open(kind, key)
            if found is not None:
                return found, True
            return self.write(kind, key, fill, describe), False

    def lock(self, kind: str, key: str):
        """Returns the build lock of one entry (a context manager)."""
        path = self.entry_path(kind, key)
        return file_lock(path.parent / f".{key}.lock")

    # --- maintenance -------------------------------------------------------------------------

    def entries(self) -> Iterator[EntryInfo]:
        """Yields every entry PrivBench wrote here (a folder holding a manifest of its form), never a foreign folder."""
        for folder in survey(self.root).entries:
            yield _info(self.root, folder)

    def verify(self) -> list[tuple[EntryInfo, str | None]]:
        """Verifies every entry; returns (entry, problem or None)."""
        out = []
        for entry in self.entries():
            try:
                verify_entry(entry.path, entry.kind, entry.key, force=True)
                problem = None
            except DamagedEntry as exc:
                problem = str(exc)
            out.append((entry, problem))
        return out


def is_no_space(exc: BaseException) -> bool:
    """Whether an error was caused by a full file system (or quota).

    ``OSError`` carries ``ENOSPC``/``EDQUOT``; torch's zip writer raises a ``RuntimeError``
    (``unexpected pos``, ``file write failed``) without an errno, as a chained cause or not.
    """
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
            return True
        if isinstance(exc, (OSError, RuntimeError)) and any(t in str(exc).lower() for t in NO_SPACE_TEXTS):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def verify_entry(path: Path, kind: str, key: str, force: bool = False) -> None:
    """Checks an entry's manifest (kind, key) and every file's size and checksum.

    A verified entry is remembered for the rest of the process (by folder, inode and
    manifest modification time), unless ``force``.

    Raises:
        DamagedEntry: Anything does not match.
    """
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        raise DamagedEntry("no manifest: an incomplete write")
    stamp = _stamp(path)
    if not force and _verified.get(stamp):
        return
    try:
        manifest = json.loads(manifest_path.read_text())
        files = manifest["files"]
        recorded = (manifest["format"], manifest["kind"], manifest["key"])
    except (OSError, ValueError, KeyError, TypeError):
        raise DamagedEntry("unreadable manifest") from None
    if recorded != (FORMAT, kind, key):
        raise DamagedEntry(f"manifest names {recorded[1]}/{recorded[2]} format {recorded[0]}")
    on_disk = {p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()} - {MANIFEST}
    if on_disk != set(files):
        extra = sorted(on_disk ^ set(files))
        raise DamagedEntry(f"files differ from the manifest ({extra[0]})")
    for rel, meta in files.items():
        file = path / rel
        size = file.stat().st_size
        if size != meta["size"]:
            raise DamagedEntry(f"{rel} has {size} bytes, {meta['size']} expected (truncated?)")
        if checksum(file) != meta["xxh3_128"]:
            raise DamagedEntry(f"{rel} checksum mismatch")
    _verified[stamp] = True


def _read_object(file: Path) -> Any:
    import torch

    return torch.load(file, map_location="cpu", weights_only=True)


def _stamp(path: Path) -> tuple[str, int, int]:
    try:
        st = (path / MANIFEST).stat()
        return (str(path), st.st_ino, st.st_mtime_ns)
    except FileNotFoundError:
        return (str(path), -1, -1)


def _info(root: Path, folder: Path) -> EntryInfo:
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    describe = ""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        describe = str(json.loads((folder / MANIFEST).read_text()).get("describe", ""))
    return EntryInfo(folder.parent.relative_to(root).as_posix(), folder.name, folder, size, describe)


def _check_name(kind: str, key: str) -> None:
    if not key or "/" in key or key.startswith(".") or ".." in kind.split("/") or kind.startswith("/"):
        raise ValueError(f"bad cache entry name {kind!r}/{key!r}")


