"""Content keys: a cell, a release and a cached model are named by what they depend on."""

from __future__ import annotations

import hashlib
import inspect
import json
import os
from pathlib import Path
from typing import Any, Mapping


def content_key(*parts: Any) -> str:
    """Returns a 20-hex-digit key of JSON-serialisable parts (dict order does not matter)."""
    text = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def cell_key(
    task: str, mechanism: str, version: int, params: Mapping[str, Any], seed: int, profile: str,
    options: Mapping[str, Any] | None = None, source: str = "",
) -> str:
    """Returns the key of one benchmark cell.

    A cell is (benchmark, mechanism, params, seed, profile); overrides of the task or attack
    configuration and the resolved settings' protocol key (``options``) are part of it
    because they change the numbers. ``source`` (:func:`source_digest`) keys a submitted
    mechanism's code, so that a file declaring another's name and version never finds its cells.
    """
    parts: list[Any] = ["cell", task, mechanism, version, dict(params), seed, profile, dict(options or {})]
    if source:
        parts.append(("source", source))
    return content_key(*parts)


_SHIPPED_PACKAGES = ("bench", "mechanisms")
_SHIPPED = tuple(str(Path(__file__).resolve().parents[2] / top) + os.sep for top in _SHIPPED_PACKAGES)
"""Folders of the mechanisms shipped with PrivBench: their ``version`` keys their code."""


def source_digest(mechanism: type) -> str:
    """Returns the SHA-256 of the file that defines a mechanism not shipped with PrivBench, else "".

    A shipped mechanism's code is keyed by its ``version``, which its maintainers bump. A
    submitted one (a ``--mechanism-file``, isolated or imported, or a plugin's module) is
    keyed by its source too, so that another file declaring the same name and version --
    a forged entry -- never reuses a release that an honest file computed into a shared
    cache. Only the defining file is read: a plugin whose module imports code of its own
    keeps that code's edits to its ``version``.
    """
    source = getattr(mechanism, "isolated_source", None)
    if source is None and str(mechanism.__module__).split(".")[0] in _SHIPPED_PACKAGES:
        from bench.core.registry import is_file_module

        if not is_file_module(mechanism.__module__):  # wherever the package was installed or shipped (Ray)
            return ""
    if source is None:
        try:
            source = inspect.getsourcefile(mechanism)
        except (TypeError, OSError):  # defined where Python keeps no file (an interactive session)
            source = None
    if source is None:
        return ""
    path = Path(source).resolve()
    if str(path).startswith(_SHIPPED):
        return ""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""
