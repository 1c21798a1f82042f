"""Results by demographic group: utility and every attack per group, with sizes, CIs and the largest gap.

A *group* is the images whose demographic attribute (``gender``, ``age_group``, ``age``,
``skin_tone``, ``race``: whichever the dataset labels) takes one value. A group smaller
than ``min_size`` targets gets its size and no number: a mean of a handful of images is
noise that would read as a finding.

- **Per-target metrics** (an attack's hit on one probe, a query's average precision):
  the group's mean over its targets, with a normal 95% interval.
- **Attacks** (:func:`attack_groups`): the group's success on released and on clean
  images and its chance level, each the mean over the group's own targets, and the
  privacy score of those three (:func:`bench.core.scores.privacy_score`, undefined when the
  clean advantage inside the group is not significant).
- **Gaps** (:func:`largest_gaps`): per attribute, the best group minus the worst, with the
  95% interval of a difference of independent means (``sqrt(h1² + h2²)``).

The result of a cell carries the tables as ``Result.groups`` (:func:`cell_groups`).
"""

from __future__ import annotations

import math
import re
import sys
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import numpy as np

from bench.core import scores

if TYPE_CHECKING:
    import torch

__all__ = ["DEMOGRAPHICS", "MIN_GROUP_SIZE", "attack_groups", "cell_groups", "demographic_groups", "largest_gaps",
           "mean_groups"]

DEMOGRAPHICS = ("gender", "age_group", "age", "skin_tone", "race")
"""Attributes that define groups of people, where a dataset labels them."""

MIN_GROUP_SIZE = 20
"""Fewest targets a group needs before any number of it is shown."""

TOO_SMALL = "group too small"


def _is_tensor(value: Any) -> bool:
    """Whether ``value`` is a torch tensor (without importing torch: none exists before it is imported)."""
    torch_module = sys.modules.get("torch")
    return torch_module is not None and isinstance(value, torch_module.Tensor)


def demographic_groups(attrs: Mapping[str, torch.Tensor], names: Mapping[str, list[str]],
                       exclude: Iterable[str] = ()) -> dict[str, dict[str, np.ndarray]]:
    """Returns ``attribute -> value name -> boolean mask`` of the demographic attributes present.

    Args:
        attrs: Attribute -> code per target (-1: unlabelled, in no group).
        names: Attribute -> value names (index = code).
        exclude: Attributes not to group by (an attribute inference attack is not sliced
            by the attribute it infers).
    """
    out: dict[str, dict[str, np.ndarray]] = {}
    for attr in DEMOGRAPHICS:
        if attr not in attrs or attr in exclude:
            continue
        codes = np.asarray(attrs[attr].cpu() if _is_tensor(attrs[attr]) else attrs[attr])
        labels = names.get(attr) or []
        groups = {(labels[c] if 0 <= c < len(labels) else str(c)): codes == c for c in sorted(set(codes.tolist()))
                  if c >= 0}
        if len(groups) > 1:
            out[attr] = groups
    return out


def _mean_ci(values: np.ndarray) -> tuple[float, float | None]:
    n = len(values)
    mean = float(values.mean())
    half = 1.96 * float(values.std(ddof=1)) / math.sqrt(n) if n > 1 else None
    return mean, half


def mean_groups(values: Any, groups: Mapping[str, Mapping[str, np.ndarray]], metric: str,
                min_size: int = MIN_GROUP_SIZE, plain: Mapping[str, Any] | None = None,
                **extra: Any) -> dict[str, dict[str, dict[str, Any]]]:
    """Returns each group's mean of a per-target metric with its 95% CI (None for one target).

    Args:
        values: One value per target.
        groups: From :func:`demographic_groups`.
        metric: The metric's name in the table.
        min_size: Fewest targets for a number.
        plain: Per-target arrays averaged per group without a CI (a chance level).
        extra: Other per-target arrays averaged per group with their CI (``clean=...``).
    """
    arrays = {metric: np.asarray(values, dtype=np.float64),
              **{k: np.asarray(v, dtype=np.float64) for k, v in extra.items()}}
    plain_arrays = {k: np.asarray(v, dtype=np.float64) for k, v in (plain or {}).items()}
    table: dict[str, dict[str, dict[str, Any]]] = {}
    for attr, members in groups.items():
        for value, mask in members.items():
            n = int(mask.sum())
            row: dict[str, Any] = {"n": n}
            if n < min_size:
                row["flag"] = TOO_SMALL
            else:
                for name, array in arrays.items():
                    row[name], row[f"{name}_ci95"] = _mean_ci(array[mask])
                for name, array in plain_arrays.items():
                    row[name] = float(array[mask].mean())
            table.setdefault(attr, {})[value] = row
    return table


def attack_groups(released: Any, clean: Any, chance: Any, groups: Mapping[str, Mapping[str, np.ndarray]],
                  metric: str, min_size: int = MIN_GROUP_SIZE) -> dict[str, Any]:
    """Returns an attack's success per group and the privacy score it implies there: ``{metric, table}``.

    Args:
        released: Per-target success on released images (1/0 hits, or scores).
        clean: Per-target success of the clean pipeline on the same targets.
        chance: Per-target success of a guess that ignores the images (a constant, or the
            training-majority guess's hit on each target).
        groups: From :func:`demographic_groups`.
        metric: The attack's primary metric name (``top1``, ``acc_gender``).
        min_size: Fewest targets for a number.
    """
    n_all = len(np.asarray(released))
    chance = np.broadcast_to(np.asarray(chance, dtype=np.float64), (n_all,))
    table = mean_groups(released, groups, metric, min_size, plain={"chance": chance}, clean=clean)
    for attr, members in table.items():
        for value, row in members.items():
            if "flag" in row:
                continue
            privacy = scores.privacy_score(row[metric], row["clean"], row["chance"], row["n"])
            row["privacy"] = privacy
            if privacy is None:
                row["flag"] = scores.TOO_WEAK
    return {"metric": metric, "table": table}


def largest_gaps(table: Mapping[str, Mapping[str, Mapping[str, Any]]], metric: str) -> dict[str, dict[str, Any]]:
    """Returns, per attribute, the largest difference of ``metric`` between two shown groups and its 95% CI.

    Attributes with fewer than two groups showing the metric get no gap.
    """
    out: dict[str, dict[str, Any]] = {}
    for attr, members in table.items():
        shown = {v: r for v, r in members.items() if r.get(metric) is not None and math.isfinite(r[metric])}
        if len(shown) < 2:
            continue
        ordered = sorted(shown, key=lambda v: shown[v][metric])
        low, high = ordered[0], ordered[-1]
        halves = [shown[v].get(f"{metric}_ci95") for v in (high, low)]
        half = math.sqrt(sum(h * h for h in halves)) if all(h is not None for h in halves) else None
        out[attr] = {"metric": metric, "gap": shown[high][metric] - shown[low][metric], "ci95": half,
                     "high": high, "low": low}
    return out


def worst_group(attack_tables: Mapping[str, Mapping[str, Mapping[str, Mapping[str, Any]]]]) -> dict[str, Any] | None:
    """Returns the group with the lowest defined privacy over every attack: ``{privacy, group, attack}``."""
    worst: dict[str, Any] | None = None
    for attack, table in attack_tables.items():
        for attr, members in table.items():
            for value, row in members.items():
                p = row.get("privacy")
                if p is not None and (worst is None or p < worst["privacy"]):
                    worst = {"privacy": p, "group": f"{attr}={value}", "attack": attack}
    return worst


def cell_groups(utility: Mapping[str, Any] | None, attacks: Mapping[str, Mapping[str, Any]],
                primary: str, min_size: int = MIN_GROUP_SIZE, note: str = "") -> dict[str, Any]:
    """Returns a cell's ``Result.groups``: the tables, their gaps and the worst group's privacy.

    Args:
        utility: The task's table (``attribute -> group -> metrics``), or None.
        attacks: Attack -> ``{metric, table}`` (from :func:`attack_groups`; attacks with
            parts give one per part, keyed ``attack.part``). Their gaps are of the attack's
            metric on released images (its success), whose CI is known.
        primary: The task's primary metric.
        min_size: The minimum group size used.
        note: How the task's per-group numbers were measured.
    """
    if not utility and not attacks:
        return {}
    out: dict[str, Any] = {"min_size": min_size}
    if utility:
        out["utility"] = {"table": utility, "gaps": largest_gaps(utility, primary), "metric": primary, "note": note}
    if attacks:
        out["attacks"] = {name: {"metric": a["metric"], "table": a["table"], "gaps": largest_gaps(a["table"], a["metric"])}
                          for name, a in attacks.items()}
        worst = worst_group({name: a["table"] for name, a in attacks.items()})
        if worst is not None:
            out["worst_privacy"] = worst
    return out


def flat_metrics(groups: Mapping[str, Any]) -> dict[str, float]:
    """Flattens ``Result.groups`` into MLflow metric names (``group.utility.gender.female.acc``)."""
    out: dict[str, float] = {}

    def add(prefix: str, table: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> None:
        for attr, members in table.items():
            for value, row in members.items():
                for name, v in row.items():
                    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                        out[f"{prefix}.{attr}.{_metric_safe(value)}.{name}"] = float(v)

    if "utility" in groups:
        add("group.utility", groups["utility"]["table"])
        for attr, gap in groups["utility"]["gaps"].items():
            out[f"group.utility.{attr}.gap"] = gap["gap"]
    for attack, part in groups.get("attacks", {}).items():
        add(f"group.{attack}", part["table"])
        for attr, gap in part["gaps"].items():
            out[f"group.{attack}.{attr}.gap"] = gap["gap"]
    if "worst_privacy" in groups:
        out["group.worst_privacy"] = groups["worst_privacy"]["privacy"]
    return out


def _metric_safe(text: str) -> str:
    """Returns a group name MLflow accepts in a metric name."""
    return re.sub(r"[^A-Za-z0-9_\-. /]", "_", text)
