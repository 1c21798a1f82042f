"""Releases: a dataset's splits passed through a mechanism, batched on the device, cached."""

from __future__ import annotations

from pathlib import Path

import torch

from bench.cells import content_key
from bench.datasets._cache import atomic_save
from bench.datasets.base import ImageSet, Splits
from bench.interfaces import Mechanism, Release, RunContext
from bench.streams import Streams

BATCH = 1024


def release_key(splits: Splits, mechanism: Mechanism, seed: int) -> str:
    """Returns the content key of (data, mechanism, version, params, seed)."""
    m = type(mechanism)
    return content_key("release", splits.fingerprint, m.name, m.version, mechanism.config, seed)


def make_release(splits: Splits, mechanism: Mechanism, ctx: RunContext, public_split: str = "train") -> Release:
    """Applies a mechanism to every split, or loads the cached release.

    Args:
        splits: Clean splits.
        mechanism: A configured mechanism.
        ctx: The run's context (device, seed, cache directory).
        public_split: The split a mechanism may fit on before releasing.

    Returns:
        The release, whose splits keep the clean labels.
    """
    key = release_key(splits, mechanism, ctx.seed)
    path = Path(ctx.cache_dir) / "releases" / f"{key}.pt"
    if path.exists():
        images = torch.load(path, map_location="cpu", weights_only=True)
        ctx.log(f"reused cached release {key[:8]}")
    else:
        mechanism.fit(splits[public_split], ctx)
        images = {name: apply_to_split(mechanism, split, ctx, f"release/{name}") for name, split in splits.sets.items()}
        atomic_save(images, path)
    return Release(
        splits=splits.replace_images(images),
        mechanism=type(mechanism).name,
        params=dict(mechanism.config),
        seed=ctx.seed,
        key=key,
        claim=mechanism.claim(),
    )


def apply_to_split(mechanism: Mechanism, split: ImageSet, ctx: RunContext, purpose: str, batch: int = BATCH) -> torch.Tensor:
    """Runs a mechanism over a split in batches on the run's device; returns CPU uint8 images.

    Image ``i`` of the split always draws from the stream of (seed, purpose, i), whatever
    the batch size.
    """
    boxes = split.boxes
    if type(mechanism).uses_boxes and boxes is None:
        from bench.faces import detect_boxes

        ctx.log(f"{purpose}: no face boxes in the dataset, detecting them with MTCNN")
        boxes = detect_boxes(split.images, ctx.device)
    out = torch.empty_like(split.images)
    for start in range(0, len(split), batch):
        images = split.images[start : start + batch].to(ctx.device)
        streams = Streams.for_images(ctx.seed, purpose, len(images), start=start, device=ctx.device)
        chunk_boxes = None if boxes is None else [b.to(ctx.device) for b in boxes[start : start + batch]]
        released = mechanism.apply(images, generator=streams, boxes=chunk_boxes)
        _check_output(mechanism, images, released)
        out[start : start + len(images)] = released.cpu()
    return out


def _check_output(mechanism: Mechanism, images: torch.Tensor, released: torch.Tensor) -> None:
    if not isinstance(released, torch.Tensor) or released.dtype != torch.uint8 or released.shape != images.shape:
        got = (getattr(released, "dtype", type(released)), tuple(getattr(released, "shape", ())))
        raise RuntimeError(
            f"mechanism {type(mechanism).name!r} returned {got}; expected uint8 of shape {tuple(images.shape)}"
        )
