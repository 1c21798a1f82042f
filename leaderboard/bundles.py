"""Cells bundles: result rows written to (and read back from) one JSON, CSV or Parquet file.

``bench report --cells FILE`` writes one; ``bench report --bundle FILE.json`` reads a JSON
one back (moved here from :mod:`leaderboard.store`, which still exports these names).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from bench.core.result import RESULT_SCHEMA, Result
from bench.errors import BenchError

__all__ = ["BUNDLE_FORMAT", "read_bundle", "write_bundle"]

BUNDLE_FORMAT = 1
"""Version of the cells-bundle JSON layout (:func:`write_bundle`)."""


def write_bundle(rows: pd.DataFrame, path: str | Path) -> int:
    """Writes result rows (``runs_frame`` / ``combine``) as a cells bundle: JSON, CSV or Parquet by suffix.

    JSON keeps every result whole (``{"bundle": 1, "cells": [Result dict + run_id,
    source, overrides]}``), so :func:`read_bundle` gives the rows back; CSV and Parquet hold
    the flat per-cell table of :func:`leaderboard.frames.results_frame` for spreadsheets and pandas.
    The file is written atomically. Returns the number of cells.

    Raises:
        BenchError: A suffix other than .json, .csv or .parquet.
    """
    from leaderboard.frames import results_frame

    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".json", ".csv", ".parquet"):
        raise BenchError(f"--cells {path}: name a .json, .csv or .parquet file")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    if suffix == ".json":
        cells = [{**Result.from_dict(r).to_dict(), "run_id": str(r.get("run_id", "")), "source": r.get("source", "local"),
                  "overrides": r.get("overrides") or {}} for r in rows.to_dict("records")]
        cells.sort(key=lambda c: (c["task"], c["mechanism"], json.dumps(c["params"], sort_keys=True, default=str),
                                  c["seed"], c["cell_key"]))
        tmp.write_text(json.dumps({"bundle": BUNDLE_FORMAT, "cells": cells}, indent=1, sort_keys=True, default=str)
                       + "\n", encoding="utf-8")
    else:
        flat = results_frame(rows)
        flat = flat.assign(params=flat["params"].map(lambda p: json.dumps(p, sort_keys=True, default=str)),
                           groups=flat["groups"].map(lambda g: json.dumps(g, sort_keys=True, default=str)))
        flat.to_csv(tmp, index=False) if suffix == ".csv" else flat.to_parquet(tmp, index=False)
    tmp.replace(path)
    return len(rows)


def read_bundle(path: str | Path) -> pd.DataFrame:
    """Reads the result rows of a JSON cells bundle (:func:`write_bundle`).

    Raises:
        BenchError: Not a bundle, an unknown bundle format, or a cell that is not a result
            of this schema.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise BenchError(f"--bundle {path}: not a readable JSON file ({exc.__class__.__name__})") from None
    if not isinstance(data, dict) or data.get("bundle") != BUNDLE_FORMAT or not isinstance(data.get("cells"), list):
        raise BenchError(f"--bundle {path}: not a cells bundle of format {BUNDLE_FORMAT} (write one with "
                         "'bench report --cells FILE.json')")
    rows = []
    for i, cell in enumerate(data["cells"]):
        try:
            result = Result.from_dict(cell)
        except (ValueError, TypeError) as exc:
            raise BenchError(f"--bundle {path}: cell {i} is not a result of schema {RESULT_SCHEMA} ({exc})") from None
        rows.append({**result.to_dict(), "run_id": str(cell.get("run_id", "")), "source": cell.get("source", "local"),
                     "overrides": cell.get("overrides") or {}})
    return pd.DataFrame(rows)
