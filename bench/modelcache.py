"""Trained models cached by content key, so mechanism-independent training happens once."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from bench.cells import content_key
from bench.datasets._cache import atomic_save


def cached_model(
    cache_dir: Path,
    key_parts: tuple[Any, ...],
    build: Callable[[], nn.Module],
    train: Callable[[nn.Module], dict[str, Any]],
    log: Callable[[str], None] = lambda msg: None,
) -> tuple[nn.Module, dict[str, Any]]:
    """Returns a trained model, training and caching it on first use.

    Args:
        cache_dir: The run's cache directory; models live in ``cache_dir/models``.
        key_parts: Everything the trained weights depend on (data key, config, seed).
        build: Makes the untrained model.
        train: Trains the model in place and returns facts to keep with it.
        log: Progress messages.

    Returns:
        The model (on the device ``build``/``train`` put it on) and the training facts.
    """
    path = Path(cache_dir) / "models" / f"{content_key(*key_parts)}.pt"
    model = build()
    if path.exists():
        saved = torch.load(path, map_location="cpu", weights_only=False)
        model.load_state_dict(saved["state"])
        log(f"reused cached model {path.name}")
        return model, saved["info"]
    started = time.perf_counter()
    info = train(model)
    log(f"trained {path.stem[:8]} in {time.perf_counter() - started:.0f} s")
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    atomic_save({"state": state, "info": info, "key": list(map(str, key_parts))}, path)
    return model, info
