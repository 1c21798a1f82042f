"""What a cell logs as MLflow metrics: the numbers compared across runs, and its training curves as step metrics.

A run's scalar metrics are what a person puts side by side in MLflow's runs table and
charts: utility, each attack's primary metric (released and clean) and privacy, the
privacy score and the worst group's, release quality, runtime. Everything else a result
holds (an attack's other metrics, counts, each demographic group) goes to the run's table
artifacts (:mod:`bench.storage.tracking.tables`) and stays in ``result.json``.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping, Sequence

from bench.core.config import flatten
from bench.core.result import Result

BATCH = 1000
"""Most metrics MLflow takes in one ``log_batch``."""


def result_metrics(result: Result) -> dict[str, float]:
    """Returns the numbers of a result that runs are compared on, under their metric names.

    ``utility.<metric>``, ``attack.<attack>.<primary>`` and ``<primary>_clean``,
    ``privacy.<attack>``, ``privacy_score``, ``group.worst_privacy``, ``release.<metric>``,
    ``runtime_s`` and ``runtime.<stage>``.
    """
    metrics = flatten("utility.", result.utility)
    for attack, values in result.attacks.items():
        primary = attack_primary(attack, values)
        kept = {k: v for k, v in values.items() if k in (primary, f"{primary}_clean")} if primary else values
        metrics.update(flatten(f"attack.{attack}.", kept))
    metrics.update(flatten("privacy.", result.privacy))
    metrics.update(flatten("release.", result.release_metrics))
    worst = (result.groups or {}).get("worst_privacy") or {}
    if is_number(worst.get("privacy")):
        metrics["group.worst_privacy"] = worst["privacy"]
    if result.privacy_score is not None:
        metrics["privacy_score"] = result.privacy_score
    metrics["runtime_s"] = result.runtime_s
    metrics.update(flatten("runtime.", result.stage_seconds or {}))
    return {k: float(v) for k, v in metrics.items() if is_number(v)}


def attack_primary(attack: str, values: Mapping[str, Any]) -> str | None:
    """Returns the name of an attack's primary metric among its values, or None when unknown.

    The registered attack declares it (``face_reid``: ``top1``); an attack no longer
    registered is recognised by its ``<primary>`` and ``<primary>_clean`` pair.
    """
    from bench.core.registry import attacks

    if attack in attacks and attacks.get(attack).primary in values:
        return attacks.get(attack).primary
    pairs = [k for k in values if f"{k}_clean" in values]
    return pairs[0] if len(pairs) == 1 else None


def metric_batches(metrics: Mapping[str, float], curves: Mapping[str, Sequence[float]] | None,
                   stamp: int) -> Iterator[list[Any]]:
    """Yields MLflow ``Metric`` batches: the result's numbers at step 0, then ``curve.<name>`` at step = epoch."""
    from mlflow.entities import Metric

    items = [Metric(k, v, stamp, 0) for k, v in metrics.items()]
    items += [Metric(f"curve.{name}", float(v), stamp, epoch) for name, values in (curves or {}).items()
              for epoch, v in enumerate(values, start=1) if is_number(v)]
    for start in range(0, len(items), BATCH):
        yield items[start:start + BATCH]


def is_number(value: Any) -> bool:
    """Whether a value is a finite-or-infinite real number (not a bool, not NaN)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
