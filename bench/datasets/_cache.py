"""Atomic on-disk caches of decoded or generated tensors."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import torch


def atomic_save(obj: Any, path: str | Path) -> None:
    """Saves ``obj`` with ``torch.save`` so that readers never see a partial file.

    The object is written to a temporary file in the same directory and moved into
    place with ``os.replace``; concurrent writers of the same content are harmless.

    Args:
        obj: Tensors in plain containers (dict, list, tuple, str, int, float, bool, None).
        path: Destination file; its directory is created when missing.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def load_or_build(path: str | Path, build_fn: Callable[[], Any]) -> Any:
    """Returns the cached object at ``path``, building and saving it first if absent.

    A cache file that cannot be read back (truncated, written by an incompatible torch)
    is rebuilt.

    Args:
        path: Cache file.
        build_fn: Builds the object (tensors in plain containers) when there is no cache.
    """
    path = Path(path)
    if path.is_file():
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except Exception:  # any unreadable cache is rebuilt; torch raises many kinds here
            pass
    obj = build_fn()
    atomic_save(obj, path)
    return obj
