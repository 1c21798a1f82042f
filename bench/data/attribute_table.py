"""Attributes of a user's images: ``attributes.csv`` read, values coded, and which splits label what.

One module for every loader of a user's data: ``folder``, ``folder_images``,
``labelled_folder`` and ``attribute_folder`` read ``ROOT/attributes.csv`` with
:func:`read_table` and code it with :func:`table_codes`; ``hf`` and ``labelled_hf`` code
their ``attribute_columns`` with :func:`code_attribute`; every one says which attributes
a split labels with :func:`labelled_in`, so an adversary that infers an attribute the data
does not label is refused when the cell is planned (:mod:`bench.cell.attribute_checks`).

How values become the classes the attribute adversary infers and the groups results are
reported by:

- names (``female``, ``20-29``), booleans, and whole numbers taking at most
  :data:`MAX_CATEGORIES` values are categorical: one class per value (names sorted,
  numbers numerically);
- ``age`` given in whole years with more values than that is binned into FairFace's nine
  age groups (:data:`AGE_GROUPS`: 0-2, 3-9, 10-19, ..., 60-69, more than 70), the classes of
  the reID paper's age task; only the groups present are classes. A few whole numbers are
  taken to be groups already (0..8 coding FairFace's bins, or decades);
- an empty cell is unlabelled (code -1): left out of the adversary's training and testing
  and of every group.
"""

from __future__ import annotations

import csv
import unicodedata
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from bench.data.classsplit import code_values
from bench.errors import BenchError

ATTRIBUTES = "attributes.csv"
CODING_VERSION = 1
"""Bump when the same values are coded differently (it is part of the decoded data's cache key)."""
MAX_CATEGORIES = 12
"""Most distinct whole numbers an attribute may take and still be one class per value."""
AGE_GROUPS = ((0, "0-2"), (3, "3-9"), (10, "10-19"), (20, "20-29"), (30, "30-39"), (40, "40-49"), (50, "50-59"),
              (60, "60-69"), (70, "more than 70"))
"""FairFace's age groups: (first year, name)."""
BINNED = {"age": AGE_GROUPS}
"""Attributes given in whole numbers that are binned when they take more than MAX_CATEGORIES values."""


def file_key(name: str) -> str:
    """Returns the form a file name is matched by: stripped, ``/`` separated, no ``./``, NFC."""
    return unicodedata.normalize("NFC", name.strip().replace("\\", "/").removeprefix("./"))


def csv_rows(path: Path) -> list[list[str]]:
    """Reads a UTF-8 CSV (a BOM allowed) into rows of stripped cells.

    Raises:
        BenchError: The file cannot be read or is not CSV.
    """
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            return [[c.strip() for c in row] for row in csv.reader(f)]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise BenchError(f"cannot read {path} as a UTF-8 CSV ({type(exc).__name__}: {exc})") from None


def read_table(path: Path, images: set[str] | None) -> tuple[list[str], dict[str, list[str]]]:
    """Reads ``attributes.csv``: a ``file,<attribute>,...`` header, then one row per image.

    Args:
        path: The file.
        images: The images a row may name (:func:`file_key` form); None: any (the caller
            checks that the files exist).

    Returns:
        The attribute names and image -> its values (strings, "" unlabelled).

    Raises:
        BenchError: No header, a duplicate column or row, a row of the wrong length, or a
            file that is not an image of the tree (each naming the line).
    """
    rows = csv_rows(path)
    if not rows or not rows[0] or rows[0][0].lower() != "file" or len(rows[0]) < 2:
        got = ",".join(rows[0]) if rows else "an empty file"
        raise BenchError(f"{path}: the first line must be a header file,<attribute>,... (got {got})")
    names = rows[0][1:]
    if len(set(names)) != len(names) or "" in names:
        raise BenchError(f"{path}:1: attribute names must be distinct and non-empty, got {','.join(names)}")
    table: dict[str, list[str]] = {}
    for line, cells in enumerate(rows[1:], start=2):
        if not any(cells):
            continue
        name = file_key(cells[0])
        if len(cells) != len(names) + 1:
            raise BenchError(f"{path}:{line}: expected {len(names) + 1} fields (file,{','.join(names)}), "
                             f"got {len(cells)}")
        if images is not None and name not in images:
            raise BenchError(f"{path}:{line}: {cells[0]!r} is not an image of the tree (paths are relative to the "
                             "root, e.g. alice/001.jpg)")
        if name in table:
            raise BenchError(f"{path}:{line}: a second row for {cells[0]!r}")
        table[name] = cells[1:]
    return names, table


def _whole(value: Any) -> int | None:
    """Returns a whole number given as an int or its decimal text, else None."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("+").isdigit():
        return int(value.strip())
    return None


def code_attribute(name: str, values: Sequence[Any]) -> tuple[list[int], list[str]]:
    """Codes one attribute's values (None or "" unlabelled, -1), binning ``age`` in years (module docstring).

    Returns:
        The code of each value and the names of the codes.
    """
    present = [v for v in values if v is not None and v != ""]
    groups = BINNED.get(name.lower())
    numbers = [_whole(v) for v in present]
    if groups is None or not present or None in numbers or len(set(numbers)) <= MAX_CATEGORIES:
        return code_values(values)
    firsts = np.asarray([first for first, _ in groups])
    bins = [int(np.searchsorted(firsts, _whole(v), side="right")) - 1 if v is not None and v != "" else -1
            for v in values]
    used = sorted({b for b in bins if b >= 0})
    index = {b: i for i, b in enumerate(used)}
    return [index.get(b, -1) for b in bins], [groups[b][1] for b in used]


def coding_note(name: str, names: Sequence[str]) -> str:
    """Says in words what an attribute's classes are (``age: FairFace's age groups (0-2, 3-9, ...)``)."""
    binned = BINNED.get(name.lower())
    if binned is not None and names and set(names) <= {n for _, n in binned}:
        return f"{name}: FairFace's age groups ({', '.join(names)})"
    more = ", ..." if len(names) > MAX_CATEGORIES else ""
    return f"{name}: {len(names)} value(s) ({', '.join(names[:MAX_CATEGORIES])}{more})"


def table_codes(table: tuple[list[str], Mapping[str, list[str]]], files: Iterable[str]
                ) -> dict[str, tuple[list[int], list[str]]]:
    """Codes every attribute of a table for the given files (a file without a row is unlabelled).

    Returns:
        Attribute -> (each file's code, the codes' names).
    """
    names, rows = table
    values = [rows.get(file_key(f), [""] * len(names)) for f in files]
    return {attr: code_attribute(attr, [v[j] for v in values]) for j, attr in enumerate(names)}


def labelled_in(attrs: Mapping[str, Sequence[int]], members: Sequence[int]) -> tuple[str, ...]:
    """Returns the attributes labelled (code >= 0) for at least one of the images ``members`` indexes."""
    return tuple(a for a, codes in attrs.items() if any(codes[i] >= 0 for i in members))
