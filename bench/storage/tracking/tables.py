"""A cell's detail as MLflow table artifacts: results per demographic group, and every attack metric.

MLflow shows a run's tables in its artifacts view (and ``mlflow.load_table`` reads them back
over runs); the run's scalar metrics stay the few numbers compared across runs
(:func:`bench.storage.tracking.metrics.result_metrics`). :func:`group_rows` is also what
``bench.group_results()`` returns for each cell.
"""

from __future__ import annotations

import warnings
from typing import Any, Mapping

from bench.core.result import Result

GROUPS_TABLE = "tables/groups.json"
ATTACKS_TABLE = "tables/attacks.json"
GROUP_COLUMNS = ["source", "attribute", "group", "n", "metric", "value", "ci95", "clean", "chance", "privacy", "flag"]
ATTACK_COLUMNS = ["attack", "metric", "value"]


def group_rows(groups: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Returns one row per source, attribute and group of ``Result.groups`` (columns :data:`GROUP_COLUMNS`).

    ``source`` is ``utility`` or the attack (``attack.part`` for an attack's part);
    ``flag`` is ``group too small`` (no number) or ``attack too weak`` (no privacy score).
    """
    groups = groups or {}
    parts = ([("utility", groups["utility"])] if "utility" in groups else []) + list(groups.get("attacks", {}).items())
    rows = []
    for name, part in parts:
        metric = part["metric"]
        for attr, members in part["table"].items():
            for value, row in members.items():
                rows.append({"source": name, "attribute": attr, "group": value, "n": row["n"], "metric": metric,
                             "value": row.get(metric), "ci95": row.get(f"{metric}_ci95"),
                             "clean": row.get("clean", row.get(f"{metric}_clean")), "chance": row.get("chance"),
                             "privacy": row.get("privacy"), "flag": row.get("flag")})
    return rows


def attack_rows(result: Result) -> list[dict[str, Any]]:
    """Returns every raw metric of every attack (counts and extras included) as ``attack, metric, value`` rows."""
    return [{"attack": attack, "metric": name, "value": value}
            for attack, values in result.attacks.items() for name, value in sorted(values.items())]


def log_tables(client: Any, run_id: str, result: Result) -> None:
    """Logs a result's group and attack tables to its run (tables with no row are left out)."""
    for path, rows, columns in ((GROUPS_TABLE, group_rows(result.groups), GROUP_COLUMNS),
                                (ATTACKS_TABLE, attack_rows(result), ATTACK_COLUMNS)):
        if rows:
            with warnings.catch_warnings():  # MLflow's own pandas deprecation, not the user's concern
                warnings.filterwarnings("ignore", message=".*select_dtypes.*")
                client.log_table(run_id, data={c: [row[c] for row in rows] for c in columns}, artifact_file=path)
