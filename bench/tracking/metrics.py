"""What a cell logs as MLflow metrics: its result's numbers, and its training curves as step metrics."""

from __future__ import annotations

from typing import Any, Iterator, Mapping, Sequence

from bench.groups import flat_metrics
from bench.interfaces import Result

BATCH = 1000
"""Most metrics MLflow takes in one ``log_batch``."""


def flatten(prefix: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """Flattens nested dicts into ``prefix + a.b.c`` keys."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, Mapping):
            out.update(flatten(f"{prefix}{key}.", value))
        else:
            out[f"{prefix}{key}"] = value
    return out


def result_metrics(result: Result) -> dict[str, float]:
    """Returns every number of a result under its metric name (``utility.acc``, ``group.face_reid...``)."""
    metrics = flatten("utility.", result.utility)
    for attack, values in result.attacks.items():
        metrics.update(flatten(f"attack.{attack}.", values))
    metrics.update(flatten("privacy.", result.privacy))
    metrics.update(flatten("release.", result.release_metrics))
    metrics.update(flat_metrics(result.groups))
    if result.privacy_score is not None:
        metrics["privacy_score"] = result.privacy_score
    metrics["runtime_s"] = result.runtime_s
    metrics.update(flatten("runtime.", result.stage_seconds or {}))
    return {k: float(v) for k, v in metrics.items() if is_number(v)}


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
