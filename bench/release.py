"""Releases: a dataset's splits passed through a mechanism, batched on the device, cached."""

from __future__ import annotations

from typing import Any

import torch

from bench import rng
from bench.cache import Cache
from bench.cells import content_key
from bench.datasets.base import ImageSet, Splits
from bench.interfaces import Mechanism, Release, RunContext
from bench.streams import Streams

BATCH = 1024


BOX_SOURCES = ("dataset", "detect")
#: Bump when the on-disk layout of a cached release changes, so old caches are not read.
RELEASE_FORMAT = 2


def release_key(splits: Splits, mechanism: Mechanism, seed: int, boxes: str = "dataset") -> str:
    """Returns the content key of (data, mechanism, version, params, seed, box source)."""
    m = type(mechanism)
    parts = ["release", RELEASE_FORMAT, rng.VERSION, splits.fingerprint, m.name, m.version, mechanism.config, seed]
    if m.uses_boxes and boxes != "dataset":
        parts.append(boxes)
    return content_key(*parts)


def make_release(
    splits: Splits, mechanism: Mechanism, ctx: RunContext, public_split: str = "train", boxes: str = "dataset"
) -> Release:
    """Applies a mechanism to every split, or loads the cached release.

    Args:
        splits: Clean splits.
        mechanism: A configured mechanism.
        ctx: The run's context (device, seed, cache directory).
        public_split: The split a mechanism may fit on before releasing.
        boxes: Where face boxes come from: ``dataset`` (MTCNN only where the dataset has
            none) or ``detect`` (MTCNN always; its recall against the dataset's boxes is
            reported, because a missed face is a leak).

    Returns:
        The release, whose splits keep the clean labels.
    """
    key = release_key(splits, mechanism, ctx.seed, boxes)
    mechanism.fit(splits[public_split], ctx)

    def build() -> dict[str, Any]:
        saved: dict[str, Any] = {"images": {}, "metrics": {}}
        for name, split in splits.sets.items():
            images, recall = apply_to_split(mechanism, split, ctx, f"release/{name}", detect=boxes == "detect")
            saved["images"][name] = images
            if recall is not None:
                saved["metrics"][f"detector_recall.{name}"] = recall
        return saved

    describe = f"{type(mechanism).name} {mechanism.config} seed {ctx.seed} of {splits.dataset} {splits.fingerprint}"
    saved, hit = Cache(ctx.cache_dir).get_or_build("releases", key, build, describe)
    if hit:
        ctx.log(f"reused cached release {key[:8]}")
    images, metrics = saved["images"], saved["metrics"]
    return Release(
        splits=splits.replace_images(images),
        mechanism=type(mechanism).name,
        params=dict(mechanism.config),
        seed=ctx.seed,
        key=key,
        claim=mechanism.claim(),
        metrics=dict(metrics),
        instance=mechanism,
    )


def apply_to_split(
    mechanism: Mechanism, split: ImageSet, ctx: RunContext, purpose: str, batch: int = BATCH, detect: bool = False
) -> tuple[torch.Tensor, float | None]:
    """Runs a mechanism over a split in batches on the run's device.

    Image ``i`` of the split always draws from the stream of (seed, purpose, i), whatever
    the batch size. Mechanisms that act on faces get the dataset's boxes, or MTCNN's where
    the dataset has none or ``detect`` is set.

    Returns:
        CPU uint8 released images, and the detector's recall against the dataset's boxes
        (None when no detection ran or the dataset has no boxes).
    """
    boxes, recall = split.boxes, None
    if type(mechanism).uses_boxes and (boxes is None or detect):
        from bench.faces import detect_boxes, detector_recall

        ctx.log(f"{purpose}: detecting face boxes with MTCNN")
        detected = detect_boxes(split.images, ctx.device)
        if boxes is not None:
            recall = detector_recall(detected, boxes)
        boxes = detected
    out = torch.empty_like(split.images)
    for start in range(0, len(split), batch):
        images = split.images[start : start + batch].to(ctx.device)
        streams = Streams.for_images(ctx.seed, purpose, len(images), start=start, device=ctx.device)
        chunk_boxes = None if boxes is None else [b.to(ctx.device) for b in boxes[start : start + batch]]
        released = mechanism.apply(images, generator=streams, boxes=chunk_boxes)
        _check_output(mechanism, images, released)
        out[start : start + len(images)] = released.cpu()
    return out, recall


def _check_output(mechanism: Mechanism, images: torch.Tensor, released: torch.Tensor) -> None:
    if not isinstance(released, torch.Tensor) or released.dtype != torch.uint8 or released.shape != images.shape:
        got = (getattr(released, "dtype", type(released)), tuple(getattr(released, "shape", ())))
        raise RuntimeError(
            f"mechanism {type(mechanism).name!r} returned {got}; expected uint8 of shape {tuple(images.shape)}"
        )
