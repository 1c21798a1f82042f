"""Flat per-cell tables of results: one column per number, for DataFrames, CSV and Parquet."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from bench.system import precision

if TYPE_CHECKING:
    import pandas as pd


def results_frame(rows: "pd.DataFrame") -> "pd.DataFrame":
    """Flattens :func:`leaderboard.store.runs_frame` rows (Result dicts) into one column per number."""
    import pandas as pd

    flat = []
    for _, row in rows.iterrows():
        out: dict[str, Any] = {k: row.get(k) for k in (
            "run_id", "cell_key", "task", "dataset", "mechanism", "mechanism_version", "seed", "profile", "eval_split",
            "synthetic", "schema", "runtime_s", "device", "git_sha", "created", "primary_metric", "dataset_fingerprint")}
        params = dict(row.get("params") or {})
        out["params"] = params
        out.update({f"param.{k}": v for k, v in params.items()})
        out["precision"] = precision.recorded(row.get("versions"))
        out.update({f"runtime.{k}": v for k, v in dict(row.get("stage_seconds") or {}).items()})
        out.update({f"utility.{k}": v for k, v in dict(row.get("utility") or {}).items()})
        for attack, metrics in dict(row.get("attacks") or {}).items():
            out.update({f"attack.{attack}.{k}": v for k, v in dict(metrics).items()})
        out.update({f"privacy.{k}": _number(v) for k, v in dict(row.get("privacy") or {}).items()})
        out["privacy_score"] = _number(row.get("privacy_score"))
        for name in ("claim", "training_claim"):
            claim = row.get(name) if isinstance(row.get(name), dict) else {}
            for field in ("epsilon", "delta", "unit", "backed", "method", "note"):
                out[f"{name}.{field}"] = claim.get(field) if claim else None
        worst = dict(row.get("groups") or {}).get("worst_privacy") or {}
        out["group.worst_privacy"] = _number(worst.get("privacy"))
        out["group.worst"] = worst.get("group")
        out["privacy_flags"] = json.dumps(row.get("privacy_flags") or {}, sort_keys=True)
        out["skipped_attacks"] = json.dumps(row.get("skipped_attacks") or {}, sort_keys=True)
        out["settings"] = json.dumps(row.get("overrides") or {}, sort_keys=True, default=str)
        out["groups"] = dict(row.get("groups") or {})
        flat.append(out)
    return pd.DataFrame(flat)


def _number(value: Any) -> float:
    return math.nan if value is None else float(value)
