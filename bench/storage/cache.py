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
removed and rebuilt, never used. Objects are stored with ``torch.save`` and read with
``weights_only=True``: tensors and plain containers only, never code.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from bench.storage.locks import file_lock, pid_alive

MANIFEST = "MANIFEST.json"
FORMAT = 1
OBJECT_FILE = "object.pt"
CHUNK = 1 << 23
STALE_TMP_S = 24 * 3600.0
"""A temporary entry of another host older than this is taken to be left by a dead process."""

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
    """

    def __init__(self, root: str | Path):
        self.root = Path(root)
        if str(self.root) not in _swept:
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
        """
        final = self.entry_path(kind, key)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.parent / f".{key}.{socket.gethostname()}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
        tmp.mkdir()
        try:
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
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
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
        """Yields every committed entry (a folder holding a manifest or meant to)."""
        if not self.root.is_dir():
            return
        for manifest in sorted(self.root.rglob(MANIFEST)):
            folder = manifest.parent
            if folder.name.startswith("."):
                continue
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

    def strays(self) -> list[Path]:
        """Returns what is neither an entry nor a lock: temporaries, half entries, files of old formats."""
        entries = {e.path for e in self.entries()}
        out: list[Path] = []

        def walk(folder: Path) -> None:
            for child in sorted(folder.iterdir()):
                if child in entries or child.name.endswith(".lock"):
                    continue
                if child.is_dir() and not child.name.endswith(".tmp"):
                    walk(child)
                else:
                    out.append(child)

        if self.root.is_dir():
            walk(self.root)
        return out


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


def remove_entry(path: Path) -> None:
    """Removes an entry's folder (readers holding mapped files keep their data)."""
    trash = path.parent / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.removed.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.rename(path, trash)
        shutil.rmtree(trash, ignore_errors=True)


def remove_stale_temporaries(root: Path) -> list[Path]:
    """Removes temporaries left by killed processes: this host's dead pids, other hosts' after a day."""
    removed: list[Path] = []
    if not root.is_dir():
        return removed
    host = socket.gethostname()
    now = time.time()
    for tmp in root.rglob(".*.tmp"):
        parts = tmp.name[1:-4].split(".")
        owner_host, pid = (parts[-3], parts[-2]) if len(parts) >= 4 else (None, None)
        dead = owner_host == host and pid is not None and pid.isdigit() and not pid_alive(int(pid))
        try:
            old = now - tmp.stat().st_mtime > STALE_TMP_S
        except FileNotFoundError:
            continue
        if dead or old or "removed" in parts:
            if tmp.is_dir():
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()
            removed.append(tmp)
    return removed


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


