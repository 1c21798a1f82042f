"""A one-file mechanism carried in its entry, so that the board loads it without a package or entry point.

``bench submit --mechanism-file F`` copies F's text and SHA-256 into the entry
(``mechanism_source``). When a board, ``bench leaderboard show`` or ``verify`` reads an entry
whose mechanism is not registered here, the text is written (once, by its digest) into a
folder of this user's and imported, as ``--mechanism-file`` would import it; so a submitted
mechanism is verified, planned for staleness and recomputed like a built-in one.

For a board (``build``, ``show``, ``serve``) loading runs the file's module-level code in
this process, as ``bench run --mechanism-file`` does: an entry's code is read by the
maintainers before they commit the entry (docs/submitting.md). ``bench leaderboard verify``,
which runs the mechanism on data, loads it isolated instead (``isolated=True``:
:mod:`bench.testing.isolated`, a worker process in a sandbox; the file is never imported
here). A text whose digest differs from the one it states is not loaded (the entry is then
unverified: its mechanism is not registered).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any, Mapping

from bench.errors import BenchError

__all__ = ["SOURCE_FIELD", "load_entry_code", "source_record"]

SOURCE_FIELD = "mechanism_source"
"""The entry field that carries a one-file mechanism: ``{"file", "sha256", "text"}``."""


def source_record(path: str | Path) -> dict[str, str]:
    """Returns what an entry carries of a mechanism file: its name, SHA-256 and text.

    Args:
        path: The ``--mechanism-file``.
    """
    data = Path(path).read_bytes()
    return {"file": Path(path).name, "sha256": hashlib.sha256(data).hexdigest(), "text": data.decode("utf-8")}


def _code_folder() -> Path:
    root = os.environ.get("BENCH_CACHE") or os.path.join(tempfile.gettempdir(), f"bench-entry-code-{os.getuid()}")
    return Path(root) / "entry_code"


def load_entry_code(entry: Mapping[str, Any], isolated: bool = False) -> str:
    """Registers an entry's carried mechanism when it is not registered here.

    Args:
        entry: The entry.
        isolated: Register a proxy whose calls run in an isolated worker
            (:func:`bench.testing.isolated.load_isolated`) instead of importing the file here.

    Returns:
        "" when the mechanism is registered (already, or now), else why it could not be loaded
        (a refusal by its sandbox too: :func:`bench.testing.isolated.raise_breach` raises it again).
    """
    from bench.core.registry import mechanisms

    name = str(entry.get("mechanism", ""))
    if name in mechanisms.list():
        return ""
    source = entry.get(SOURCE_FIELD)
    if not isinstance(source, dict) or not isinstance(source.get("text"), str):
        return f"mechanism {name!r} is not registered here and the entry carries no source"
    data = source["text"].encode("utf-8")
    digest = hashlib.sha256(data).hexdigest()
    if digest != source.get("sha256"):
        return f"the source of mechanism {name!r} the entry carries does not match its SHA-256"
    folder = _code_folder() / digest[:16]
    target = folder / Path(str(source.get("file") or "mechanism.py")).name
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not target.is_file() or hashlib.sha256(target.read_bytes()).hexdigest() != digest:
            fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, target)
        registered = _load(target, isolated)
    except (OSError, BenchError) as exc:
        return f"the source of mechanism {name!r} the entry carries cannot be loaded: {exc}"
    if name not in registered and name not in mechanisms.list():
        return f"the source the entry carries does not register mechanism {name!r}"
    return ""


def _load(path: Path, isolated: bool) -> list[str]:
    """Imports the file here, or (``isolated``) registers its mechanisms' proxies; returns their names."""
    from bench.core.registry import load_file

    if not isolated:
        return load_file(path)
    from bench.testing.isolated import isolation_mode, load_isolated, registered_by

    if isolation_mode() == "none":
        return load_file(path)
    load_isolated([path])
    return registered_by([path])
