"""Training curves of the models a cell used, kept for MLflow's step metrics.

A training function returns its per-epoch values as ``info["curve"]`` (name -> one value
per epoch); :func:`bench.storage.modelcache.cached_model` stores them with the weights and, on a
fresh training and on a cache hit alike, hands them to :func:`record` under the model's
name. :func:`recording` collects what a cell's models recorded; the tracker logs each value
as metric ``curve.<model>.<name>`` at step = epoch (1-based).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from typing import Any, Iterator, Mapping

__all__ = ["EpochValues", "record", "recording"]

_current: contextvars.ContextVar[tuple[dict[str, list[float]], set[str]] | None] = contextvars.ContextVar(
    "bench_curves", default=None)


class EpochValues:
    """Sums values within an epoch and keeps each epoch's mean (tensors are summed on their device)."""

    def __init__(self) -> None:
        self.means: list[float] = []
        self._sum: Any = 0.0
        self._count = 0

    def add(self, value: Any) -> None:
        """Adds one step's value (a float or a 0-d tensor, detached here)."""
        self._sum = self._sum + (value.detach() if hasattr(value, "detach") else value)
        self._count += 1

    def close_epoch(self) -> None:
        """Ends the epoch: its mean joins :attr:`means` (NaN without steps)."""
        self.means.append(float(self._sum) / self._count if self._count else math.nan)
        self._sum, self._count = 0.0, 0


@contextlib.contextmanager
def recording() -> Iterator[dict[str, list[float]]]:
    """Collects the curves recorded inside the block: ``curve key -> values by epoch``."""
    collected: dict[str, list[float]] = {}
    token = _current.set((collected, set()))
    try:
        yield collected
    finally:
        _current.reset(token)


def record(model: str, key: str, curve: Mapping[str, Any] | None) -> None:
    """Records a model's curves (``name -> values by epoch``) in the cell being recorded, if any.

    Args:
        model: The model's name in the cell (``fewshot.clean``, ``attribute_inference.gender``);
            another model of the same name in one cell is recorded as ``<name>_2``.
        key: The model's cache key: a model used twice in one cell is recorded once.
        curve: Its curves; None or empty records nothing.
    """
    state = _current.get()
    if state is None or not curve:
        return
    collected, keys = state
    if key in keys:
        return
    keys.add(key)
    taken = {name.rsplit(".", 1)[0] for name in collected}
    unique, count = model, 1
    while unique in taken:
        count += 1
        unique = f"{model}_{count}"
    for name, values in curve.items():
        collected[f"{unique}.{name}"] = [float(v) for v in values]
