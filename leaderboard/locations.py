"""Where entry files are: the user's folder (read and written) and the shipped baselines (read only).

``bench submit`` writes, and ``bench leaderboard build | show | serve | verify`` read, the
entries of the *user's* folder: ``./leaderboard/entries`` of the current working directory
(the user's project), or the folder ``--entries DIR`` (or ``$BENCH_ENTRIES``) names. The
baselines the package ships (:data:`leaderboard.store.ENTRIES_DIR`) are a separate,
read-only source: they are shown beside the user's entries when the user's folder is the
default one, read once when that default folder *is* the package's (the repository
checkout), and never written unless a command names their folder explicitly (the
maintainers' ``benchmarks/baselines.sh`` does). A named folder is read alone, as before.

An entry records no absolute local path: :func:`portable_uri` turns the tracking URI it
records into one relative to the submitter's folder, or a label that names no path.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Collection
from urllib.parse import urlsplit, urlunsplit
from urllib.request import url2pathname

from bench.errors import BenchError
from leaderboard.store import ENTRIES_DIR, Skipped, read_entries

if TYPE_CHECKING:
    import pandas as pd

    from leaderboard.declare import Declaration

__all__ = ["PROJECT_ENTRIES", "SHIPPED_DIR", "EntryFolders", "entry_folders", "folder_sheets", "portable_uri",
           "read_entry_folders", "same_folder", "entry_names_in"]

SHIPPED_DIR = ENTRIES_DIR
"""The package's own entries: the shipped baselines (read only)."""
PROJECT_ENTRIES = Path("leaderboard") / "entries"
"""The user's entries folder, relative to the current working directory (the user's project)."""


def same_folder(a: Path, b: Path) -> bool:
    """Whether two paths name one folder (the same real path; either may be missing)."""
    return os.path.realpath(a) == os.path.realpath(b)


@dataclass(frozen=True)
class EntryFolders:
    """The entry folders a command reads and writes.

    Attributes:
        folder: The user's entries folder: ``bench submit`` writes here; read when it is a folder.
        named_by: What named it: ``--entries``, ``$BENCH_ENTRIES``, or "" for the default
            ``./leaderboard/entries`` of the current folder.
        shipped: The shipped baselines' folder, read beside ``folder``; None when a named
            folder is read alone, or when ``folder`` is the shipped folder itself (read once).
    """

    folder: Path
    named_by: str = ""
    shipped: Path | None = None

    @property
    def label(self) -> str:
        """How messages name the user's folder (``--entries DIR``, or ``./leaderboard/entries`` and why)."""
        if self.named_by:
            return f"{self.named_by} {self.folder}"
        return f"{self.folder} (the current folder's {PROJECT_ENTRIES}; --entries names another)"

    @property
    def is_shipped(self) -> bool:
        """Whether the user's folder is the package's own folder of shipped baselines (the checkout)."""
        return same_folder(self.folder, SHIPPED_DIR)

    def reading(self) -> list[Path]:
        """Returns the folders to read, the shipped one first, each once; a missing user folder is left out."""
        out = [self.shipped] if self.shipped is not None and self.shipped.is_dir() else []
        if self.folder.is_dir() and not any(same_folder(self.folder, f) for f in out):
            out.append(self.folder)
        return out

    def check_writable(self) -> None:
        """Refuses to write into the package's shipped baselines unless a command named that folder.

        Raises:
            BenchError: The default folder is the package's own (the current folder is the
                repository checkout) and no ``--entries`` named it.
        """
        if self.is_shipped and not self.named_by:
            raise BenchError(f"{self.folder} is the package's own folder of shipped baselines (the current folder is "
                             f"the PrivBench checkout), written only when named: pass --entries {PROJECT_ENTRIES} to "
                             "write there, or run from your own project's folder")

    def check_name(self, name: str) -> None:
        """Refuses an entry name a shipped baseline has where the two would share the boards.

        Raises:
            BenchError: The shipped baselines are shown beside this folder and one is named ``name``.
        """
        if self.shipped is None:
            return
        taken = entry_names_in(self.shipped)
        if name in taken:
            raise BenchError(f"entry name {name!r} is a shipped baseline's ({taken[name]} in {self.shipped}); the "
                             "boards show both, so pass --name to name yours")


def entry_folders(named: Path | None, named_by: str = "--entries", cwd: Path | None = None) -> EntryFolders:
    """Returns the folders of a command's entries.

    Args:
        named: The folder ``--entries`` (or ``$BENCH_ENTRIES``) names, or None for the default.
        named_by: What named it, for messages.
        cwd: The current folder (default: the process's).

    Returns:
        A named folder alone; else ``cwd/leaderboard/entries`` with the shipped baselines
        beside it (once, when the two are one folder).
    """
    if named is not None:
        return EntryFolders(Path(named), named_by)
    folder = (Path.cwd() if cwd is None else Path(cwd)) / PROJECT_ENTRIES
    return EntryFolders(folder, "", None if same_folder(folder, SHIPPED_DIR) else SHIPPED_DIR)


def entry_names_in(folder: Path = SHIPPED_DIR) -> dict[str, str]:
    """Returns entry name -> file name of the entries in a folder (unreadable files left out; reading says why)."""
    out: dict[str, str] = {}
    for path in sorted(Path(folder).glob("*.json")):
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            continue
        if isinstance(entry, dict) and "name" in entry:
            out.setdefault(str(entry["name"]), path.name)
    return out


def read_entry_folders(folders: EntryFolders, skipped: Skipped | None = None, data_root: Path | None = None,
                       current: Collection[str] = ()) -> tuple["pd.DataFrame", list["Declaration"]]:
    """Reads the entries of every folder (:func:`leaderboard.store.read_entries`), the user's over the shipped.

    A user's entry named as a shipped one hides that one on the boards (``skipped.shadowed``
    names it, for one warning line); the shipped file is not touched.

    Raises:
        BenchError: A malformed entry, or two entries with one name in one folder.
    """
    import pandas as pd

    reading = folders.reading()
    frames, declarations = [], []
    own: Collection[str] = ()
    if folders.folder in reading:
        frame, declared = read_entries(folders.folder, skipped, data_root, current)
        frames.append(frame)
        declarations.extend(declared)
        own = {d.name for d in declared}
    if folders.shipped is not None and folders.shipped in reading:
        frame, declared = read_entries(folders.shipped, skipped, data_root, current, exclude=own)
        frames.insert(0, frame)
        declarations[:0] = declared
    frames = [f for f in frames if len(f)]
    return (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()), declarations


def folder_sheets(folders: EntryFolders) -> tuple[dict[str, Path], list[str]]:
    """Returns the verified sample sheets of the entries of every folder (the user's over the shipped), and notes."""
    from leaderboard.sheets import entry_sheets

    sheets: dict[str, Path] = {}
    notes: list[str] = []
    for folder in folders.reading():
        found, said = entry_sheets(folder)
        sheets.update(found)
        notes.extend(said)
    return sheets, notes


def portable_uri(uri: str | None, base: Path | None = None) -> str | None:
    """Returns a tracking URI an entry may record: no absolute local path, no credentials.

    A local store (``sqlite:///PATH``, ``file:///PATH`` or a bare path) inside ``base`` is
    recorded relative to it (``sqlite:///results/mlflow.db``); one outside it as a label
    that names its kind and file name only (``sqlite store mlflow.db (path not recorded)``).
    A remote URI is kept without its user name and password.

    Args:
        uri: The tracking URI the cells were logged to (None stays None).
        base: The submitter's folder (default: the current folder).
    """
    if not uri:
        return uri
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    if scheme.startswith("sqlite"):
        prefix, _, rest = uri.partition(":///")
        if not rest:
            return uri  # no database path (refused where the store opens)
        path, sep, query = rest.partition("?")
        return _local(prefix, path, base, sep + query)
    if scheme == "file":
        return _local("file", url2pathname(parts.path), base, "")
    if scheme in ("", *"abcdefghijklmnopqrstuvwxyz") and Path(uri).is_absolute():  # a bare (or drive-letter) path
        return _local("", uri, base, "")
    if parts.username is not None or parts.password is not None:
        host = parts.hostname or ""
        return urlunsplit(parts._replace(netloc=host + (f":{parts.port}" if parts.port else "")))
    return uri


def _local(scheme: str, path: str, base: Path | None, query: str) -> str:
    """Returns a local store's location relative to ``base``, or a label naming no path."""
    where = Path(path)
    if not where.is_absolute():
        return f"{scheme}:///{where.as_posix()}{query}" if scheme else where.as_posix()
    base = (Path.cwd() if base is None else Path(base)).resolve()
    try:
        relative = Path(os.path.realpath(where)).relative_to(base)
    except ValueError:
        return f"{scheme or 'local'} store {where.name} (path not recorded)"
    if scheme == "file":
        return relative.as_posix()  # a file: URI cannot be relative; the folder is what it names
    return f"{scheme}:///{relative.as_posix()}{query}" if scheme else relative.as_posix()
