"""Releases: a dataset's splits passed through a mechanism, batched on the device, cached."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Callable

import torch

from bench.core.interfaces import Mechanism, PrivacyClaim, Release, RunContext
from bench.core.keys import content_key, source_digest
from bench.data.base import ImageSet, Splits, content_digest
from bench.data.shards import SplitWriter, open_split
from bench.randomness import rng
from bench.randomness.streams import Streams
from bench.release import guard as mechanism_guard
from bench.release.facecrops import FaceCrops, release_crops
from bench.storage.cache import Cache
from bench.system import kernels, precision
from bench.system.kernels import DEVICE_BATCH_VALUES

BATCH = 1024
"""Images per batch on the CPU (and the fewest per batch on an accelerator)."""
DEVICE_HOLD_BYTES = 1 << 29
"""Released bytes an accelerator holds before they go to the host in one copy."""


BOX_SOURCES = ("dataset", "detect")
#: Bump when the on-disk layout of a cached release changes, so old caches are not read.
RELEASE_FORMAT = 4


def release_key(splits: Splits, mechanism: Mechanism, seed: int, boxes: str = "dataset", fitted_on: str = "") -> str:
    """Returns the content key of a release: data, mechanism (version, and source where submitted), params, seed, boxes, fit."""
    m = type(mechanism)
    parts = ["release", RELEASE_FORMAT, rng.VERSION, splits.fingerprint, m.name, m.version, mechanism.config, seed]
    digest = source_digest(m)
    if digest:
        parts.append(("source", digest))
    if m.uses_boxes and boxes != "dataset":
        parts.append(boxes)
    if fitted_on:
        parts.append(fitted_on)
    return content_key(*parts)


def needs_fit(mechanism: Mechanism) -> bool:
    """Whether a mechanism fits on data before it releases (it overrides :meth:`Mechanism.fit`)."""
    return type(mechanism).fit is not Mechanism.fit


def make_release(
    splits: Splits,
    mechanism: Mechanism,
    ctx: RunContext,
    public: Callable[[], ImageSet | None] = lambda: None,
    boxes: str = "dataset",
) -> Release:
    """Applies a mechanism to every split, or loads the cached release.

    A mechanism that fits is fitted on the dataset's public data, which is never released;
    where the dataset has none it is fitted on the train split, and its claim is withheld
    for that split (a guarantee about images the mechanism was fitted on is not one).

    Args:
        splits: Clean splits.
        mechanism: A configured mechanism.
        ctx: The run's context (device, seed, cache directory).
        public: Loads the dataset's public data (called only for mechanisms that fit).
        boxes: Where face boxes come from: ``dataset`` (MTCNN only where the dataset has
            none) or ``detect`` (MTCNN always; its recall against the dataset's boxes is
            reported, because a missed face is a leak).

    Returns:
        The release, whose splits keep the clean labels.
    """
    withheld: tuple[str, ...] = ()
    fitted_on = ""
    if needs_fit(mechanism):
        data = public()
        if data is None:
            data, withheld = splits["train"], ("train",)
            ctx.log(f"{splits.dataset} has no public data: {type(mechanism).name} fits on train")
        fitted_on = content_digest({"images": data.images, "withheld": list(withheld)})
        with precision.exact():
            mechanism_guard.fit(mechanism, data, ctx)
    key = release_key(splits, mechanism, ctx.seed, boxes, fitted_on)

    def fill(folder: Path) -> None:
        meta: dict[str, Any] = {"metrics": {}, "splits": {}}
        total = sum(split.images.numel() for split in splits.sets.values())
        meta["kernels"] = kernels.choose(ctx.device, total)
        for name, split in splits.sets.items():
            sink = SplitWriter(folder / "images" / name, split.images.shape[1:])
            _, recall = apply_to_split(mechanism, split, ctx, f"release/{name}", detect=boxes == "detect",
                                       path=meta["kernels"], sink=sink)
            sink.close()
            meta["splits"][name] = list(split.images.shape[1:])
            if recall is not None:
                meta["metrics"][f"detector_recall.{name}"] = recall
        torch.save(meta, folder / "meta.pt")

    describe = f"{type(mechanism).name} {mechanism.config} seed {ctx.seed} of {splits.dataset} {splits.fingerprint}"
    folder, hit = Cache(ctx.cache_dir).get_or_write("releases", key, fill, describe)
    if hit:
        ctx.log(f"reused cached release {key[:8]}")
    saved = torch.load(folder / "meta.pt", map_location="cpu", weights_only=True)
    images = {name: open_split(folder / "images" / name, chw) for name, chw in saved["splits"].items()}
    metrics = saved["metrics"]
    channels, *size = next(iter(splits.sets.values())).images.shape[-3:]
    return Release(
        splits=splits.replace_images(images),
        mechanism=type(mechanism).name,
        params=dict(mechanism.config),
        seed=ctx.seed,
        key=key,
        claim=benchmark_claim(mechanism, tuple(size), withheld, int(channels)),
        metrics=dict(metrics),
        instance=mechanism,
        kernels=saved["kernels"],
    )


def benchmark_claim(mechanism: Mechanism, size: tuple[int, int], withheld: tuple[str, ...] = (),
                    channels: int = 3) -> PrivacyClaim | None:
    """Returns a mechanism's claim as a benchmark cell can back it, for images of ``size`` and ``channels``.

    The note says that the noise is reproducible (drawn from public seeds); the delta
    includes what the Laplace sampler's clamp implies for the built-in mechanisms
    (:func:`bench.release.secure_streams.tail_delta`); splits the mechanism was fitted on are
    withheld.
    """
    from bench.release.secure_streams import DrawTally, laplace_exposure, tail_delta

    claim = mechanism.claim()
    if claim is None:
        return None
    notes = [claim.note, "benchmark release: the noise is reproducible from the seed in this result "
                         "(use 'bench release' for real use)"]
    delta = claim.delta
    if laplace_exposure(mechanism, size, channels) is not None:
        added, why = tail_delta(mechanism, claim, size, DrawTally(), channels)
        if added:
            delta = min(1.0, delta + added)
            notes.append(f"delta includes {added:.3g} for the Laplace sampler's clamp ({why})")
    if withheld:
        notes.append(f"withheld for {', '.join(withheld)}: the mechanism was fitted on it (no public data)")
    return dataclasses.replace(claim, delta=delta, note="; ".join(n for n in notes if n), withheld=withheld)


def apply_to_split(
    mechanism: Mechanism, split: ImageSet, ctx: RunContext, purpose: str, batch: int | None = None,
    detect: bool = False, path: str | None = None, sink: SplitWriter | None = None,
) -> tuple[torch.Tensor | None, float | None]:
    """Runs a mechanism over a split in batches on the run's device.

    Image ``i`` of the split always draws from the stream of (seed, purpose, i), whatever
    the batch size. Mechanisms that act on faces get the dataset's boxes, or MTCNN's where
    the dataset has none or ``detect`` is set. Face crops of scenes
    (:class:`~bench.release.facecrops.FaceCrops`) come out as a release makes them: their
    scenes go through the mechanism, then the crops are cut. Fused kernels run ``path``
    (``compiled`` or ``eager``; by default what :func:`bench.system.kernels.choose` picks for
    the split's size).
    With a ``sink`` the released batches are written to it as they come (a split of any
    size), else they are returned as one tensor. The mechanism gets private copies of every
    batch, its boxes and streams (:func:`bench.release.guard.apply`): it cannot change the split.

    On the CPU a batch is :data:`BATCH` images. On an accelerator it is at least that and
    up to :data:`DEVICE_BATCH_VALUES` values; images go up from pinned memory without
    blocking, and released batches stay on the device until :data:`DEVICE_HOLD_BYTES`
    have gathered, which then come back to the host in one copy (:class:`_DeviceHold`),
    so the device is not made to wait for the host after every batch.

    Returns:
        CPU uint8 released images (None with a sink), and the detector's recall against the
        dataset's boxes (None when no detection ran or the dataset has no boxes).
    """
    with precision.exact():
        if isinstance(split, FaceCrops) and split.origin is not None and sink is None:
            return release_crops(split, lambda scenes, k: _apply(mechanism, scenes, ctx, f"{purpose}/scenes{k}", batch,
                                                                 detect, path, None)[0]), None
        return _apply(mechanism, split, ctx, purpose, batch, detect, path, sink)


def _apply(mechanism: Mechanism, split: ImageSet, ctx: RunContext, purpose: str, batch: int, detect: bool,
           path: str | None, sink: SplitWriter | None) -> tuple[torch.Tensor | None, float | None]:
    boxes, recall = split.boxes, None
    if type(mechanism).uses_boxes and (boxes is None or detect):
        from bench.faces.detect import detect_boxes, detector_recall

        ctx.log(f"{purpose}: detecting face boxes with MTCNN")
        detected = detect_boxes(split.images, ctx.device)
        if boxes is not None:
            recall = detector_recall(detected, boxes)
        boxes = detected
    out = None if sink is not None else torch.empty(tuple(split.images.shape), dtype=torch.uint8)
    device = torch.device(ctx.device)
    resident = stays_on_device(device)
    image_values = max(1, math.prod(split.images.shape[1:]))
    batch = batch or (max(BATCH, DEVICE_BATCH_VALUES // image_values) if resident else BATCH)
    path = path or kernels.choose(device, split.images.numel())

    def deliver(start: int, released: torch.Tensor) -> None:
        if sink is not None:
            sink.add(released)
        else:
            out[start : start + len(released)] = released

    hold = _DeviceHold(deliver, DEVICE_HOLD_BYTES if resident else 0)
    for start in range(0, len(split), batch):
        images = split.images[start : start + batch]
        streams = Streams.for_images(ctx.seed, purpose, len(images), start=start, device=device)
        chunk_boxes = None if boxes is None else boxes[start : start + batch]
        with kernels.using(path):
            released = mechanism_guard.apply(mechanism, images, generator=streams, boxes=chunk_boxes, device=device)
        hold.add(start, released)
    hold.flush()
    return out, recall


def stays_on_device(device: torch.device) -> bool:
    """Whether releases on ``device`` gather there before going to the host (any accelerator; not the CPU)."""
    return device.type != "cpu"


class _DeviceHold:
    """Released batches kept where they were computed until ``limit`` bytes gather, then sent to the host at once.

    With ``limit`` 0 every batch goes to the host as it comes.

    Args:
        deliver: Called with the split index of the first image and the host uint8 images
            of consecutive batches, in order.
        limit: Bytes to gather before a copy to the host.
    """

    def __init__(self, deliver: Callable[[int, torch.Tensor], None], limit: int):
        self.deliver, self.limit = deliver, limit
        self.parts: list[torch.Tensor] = []
        self.first, self.held = 0, 0

    def add(self, start: int, released: torch.Tensor) -> None:
        """Holds the batch of images ``start ..``; sends what is held once it reaches the limit."""
        if not self.parts:
            self.first = start
        self.parts.append(released)
        self.held += released.numel() * released.element_size()
        if self.held >= self.limit:
            self.flush()

    def flush(self) -> None:
        """Sends everything held to the host in one copy."""
        if not self.parts:
            return
        gathered = self.parts[0] if len(self.parts) == 1 else torch.cat(self.parts)
        self.parts, self.held = [], 0
        self.deliver(self.first, gathered.cpu())
