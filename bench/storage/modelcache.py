"""Trained models cached by content key, so mechanism-independent training happens once."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from bench.core import curves
from bench.core.keys import content_key
from bench.storage.cache import Cache
from bench.system import precision


def cached_model(
    cache_dir: Path,
    key_parts: tuple[Any, ...],
    build: Callable[[], nn.Module],
    train: Callable[[nn.Module], dict[str, Any]],
    log: Callable[[str], None] = lambda msg: None,
    name: str | None = None,
) -> tuple[nn.Module, dict[str, Any]]:
    """Returns a trained model, training and caching it on first use.

    Weights are stored as tensors only and verified on read (:mod:`bench.storage.cache`); a damaged
    entry is retrained. Concurrent processes train one model once.

    Args:
        cache_dir: The run's cache directory; models live in ``cache_dir/models``.
        key_parts: Everything the trained weights depend on (data key, config, seed). A model
            trained on the CPU is keyed by torch's thread count too: threads split float sums,
            so a model trained on 1 thread (a grid worker's share) differs from one trained on 2.
            The precision in force (:func:`bench.system.precision.key_parts`) is added as well.
        build: Makes the untrained model.
        train: Trains the model in place and returns facts to keep with it (numbers and
            strings only; ``curve``: name -> one value per epoch, see :mod:`bench.core.curves`).
        log: Progress messages.
        name: The model's name in the cell; its curves are recorded under it (fresh or cached).

    Returns:
        The model (on the device ``build``/``train`` put it on) and the training facts
        (without the curves).
    """
    model = build()
    key = content_key(*key_parts, *_cpu_threads(model), *precision.key_parts())

    def make() -> dict[str, Any]:
        started = time.perf_counter()
        info = train(model)
        log(f"trained {key[:8]} in {time.perf_counter() - started:.0f} s")
        return {"state": {k: v.detach().cpu() for k, v in model.state_dict().items()}, "info": info}

    saved, hit = Cache(cache_dir).get_or_build("models", key, make, describe=repr(key_parts)[:500])
    if hit:
        model.load_state_dict(saved["state"])
        log(f"reused cached model {key[:8]}")
    info = dict(saved["info"])
    curve = info.pop("curve", None)
    if name is not None:
        curves.record(name, key, curve)
    return model, info


def _cpu_threads(model: nn.Module) -> tuple[Any, ...]:
    """Returns ``("cpu_threads", N)`` for a model with parameters on the CPU (or none at all), else nothing."""
    params = list(model.parameters())
    on_cpu = not params or any(t.device.type == "cpu" for t in params)
    return ("cpu_threads", torch.get_num_threads()) if on_cpu else ()
