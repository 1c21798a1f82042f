"""CelebA's annotation files: where they are in the official layout, and how they parse.

Every malformed line is a :class:`~bench.errors.BenchError` that names the file and line.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Sequence

import numpy as np

from bench.errors import BenchError

__all__ = ["file_digest", "find_file", "find_images", "read_lines", "read_pairs", "read_table"]


def find_file(base: Path, name: str) -> Path | None:
    """Returns the annotation file ``name`` in the root or its ``Anno``/``Eval`` folder, or None."""
    for folder in (base, base / "Anno", base / "Eval"):
        if (folder / name).is_file():
            return folder / name
    return None


def find_images(base: Path, folder: str) -> Path | None:
    """Returns the image folder ``folder`` (under the root or ``Img``, unwrapped once if nested), or None."""
    for path in (base / folder, base / "Img" / folder):
        if path.is_dir():
            nested = path / folder
            return nested if nested.is_dir() and not any(path.glob("*.jpg")) else path
    return None


def file_digest(path: Path) -> str:
    """Returns the SHA-256 of a file's bytes (hex)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_lines(path: Path) -> list[str]:
    """Returns a text file's lines.

    Raises:
        BenchError: The file cannot be read as UTF-8.
    """
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise BenchError(f"celeba: cannot read {path}: {exc}") from None


def read_pairs(path: Path, what: str) -> tuple[list[str], list[int]]:
    """Parses '<image> <integer>' lines (identity and partition files)."""
    names, values = [], []
    for number, line in enumerate(read_lines(path), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2 or not _is_int(parts[1]):
            raise BenchError(f"celeba: {path}:{number}: expected '<image> <{what}>', got {line.strip()!r}")
        names.append(parts[0])
        values.append(int(parts[1]))
    if not names:
        raise BenchError(f"celeba: {path} lists no images")
    return names, values


def _is_int(token: str) -> bool:
    return token.lstrip("-").isdigit()


def read_table(path: Path, wanted: Sequence[str], columns: int | None = None) -> tuple[list[str], np.ndarray]:
    """Parses a CelebA table: a count line, a header line, then '<image> v1 v2 ...' rows.

    Args:
        path: The table file (attributes, boxes or landmarks).
        wanted: Images whose rows are returned, in this order.
        columns: Expected number of values per row; by default the header's length.

    Returns:
        The column names (without ``image_id``) and an int64 array [len(wanted), columns].

    Raises:
        BenchError: The count or header line is malformed, the count disagrees with the
            rows, a row has the wrong number of values, or a wanted image has no row.
    """
    lines = read_lines(path)
    if len(lines) < 2 or not _is_int(lines[0].strip()):
        raise BenchError(f"celeba: {path}: expected a count line and a header line")
    header = lines[1].split()
    if header and header[0] == "image_id":
        header = header[1:]
    width = len(header) if columns is None else columns
    if len(header) != width:
        raise BenchError(f"celeba: {path}:2: expected {width} column names, got {len(header)}")
    rows: dict[str, str] = {}
    for line in lines[2:]:
        parts = line.split(None, 1)
        if parts:
            rows[parts[0]] = parts[1] if len(parts) > 1 else ""
    if int(lines[0]) != len(rows):
        raise BenchError(f"celeba: {path}: the count line says {int(lines[0])} rows, the file has {len(rows)}")
    values = np.empty((len(wanted), width), dtype=np.int64)
    for i, name in enumerate(wanted):
        if name not in rows:
            raise BenchError(f"celeba: {path}: no row for {name}")
        fields = rows[name].split()
        if len(fields) != width or not all(_is_int(t) for t in fields):
            raise BenchError(f"celeba: {path}: row {name} must hold {width} integers, got {rows[name].strip()!r}")
        values[i] = [int(t) for t in fields]
    return header, values
