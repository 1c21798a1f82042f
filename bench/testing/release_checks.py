"""Checks on a whole release of a claimed mechanism: no image left as it was, no image noised far less than the rest.

The conformance suite and the audit look at a mechanism on a few small batches; a mechanism
can behave on those and cheat on the release itself (an image in a thousand returned as
it came, on a batch position, a stream seed or an image size the small checks never
show). These checks read every image of a release that went through the guarded release
path (:func:`bench.release.dataset.apply_to_split`, the path a cell's release takes):

- ``unchanged``: no released image equals its own input;
- ``clean_copy``: no released image is byte-equal to any clean image of the split;
- ``noise_outlier``: the per-image change (mean absolute change, and the fraction of values
  changed) has no image far below the bulk: both below :data:`OUTLIER_RATIO` times their
  medians. A mechanism whose noise does not depend on the content changes every image by
  about the same amount; clipping at 0 and 255 can at most halve it.

They apply to mechanisms that make a formal claim (a claim is a promise about every image);
a mechanism without one (blur, pixelation) may leave a flat image as it was.

Besides the split under its cells' own streams, :func:`release_sweep` releases the split
again under other streams, up to :func:`sweep_images` images in all, so that a cheat keyed
on one stream seed in a thousand shows up with near certainty.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from bench.core.interfaces import Mechanism, RunContext
from bench.data.base import ImageSet
from bench.errors import BenchError
from bench.release.dataset import apply_to_split

__all__ = [
    "OUTLIER_RATIO",
    "SWEEP_IMAGES",
    "SWEEP_VALUES",
    "ReleaseCheckError",
    "check_release",
    "release_sweep",
    "sweep_images",
]

OUTLIER_RATIO = 0.1
"""An image is a noise outlier when its mean absolute change and its fraction of changed values are both
below this fraction of the release's medians (honest dp_pix, image_dp and dp_latent at the shipped suites'
settings stay above 0.3 of the median on the shipped boards' splits)."""

SWEEP_IMAGES = 16_384
"""Most images the stream sweep releases per configuration (a 1-in-1000 stream cheat is missed with
probability e^-16 at this count)."""

SWEEP_VALUES = 1 << 28
"""Most image values the stream sweep releases per configuration (bounds its time on large images)."""

MIN_SWEEP_IMAGES = 4_096
"""Fewest images the stream sweep releases, whatever the image size."""


class ReleaseCheckError(BenchError):
    """A release-level check failed; the message names the check and the first offending image."""


@dataclass(frozen=True)
class ReleaseStats:
    """Per-image change of a release.

    Attributes:
        mean_abs: Mean absolute change of each image's values, float64 [N].
        changed: Fraction of each image's values that changed, float64 [N].
    """

    mean_abs: torch.Tensor
    changed: torch.Tensor


def digest_list(images: torch.Tensor) -> list[bytes]:
    """Returns the SHA-256 of each image's bytes, in order."""
    flat = images.reshape(len(images), -1).contiguous().cpu().numpy()
    return [hashlib.sha256(row.tobytes()).digest() for row in flat]


def image_digests(images: torch.Tensor) -> dict[bytes, int]:
    """Returns SHA-256 of each image's bytes -> its first index."""
    found: dict[bytes, int] = {}
    for i, digest in enumerate(digest_list(images)):
        found.setdefault(digest, i)
    return found


def release_stats(clean: torch.Tensor, released: torch.Tensor) -> ReleaseStats:
    """Returns each image's mean absolute change and fraction of changed values."""
    diff = (released.reshape(len(released), -1).to(torch.int16) - clean.reshape(len(clean), -1).to(torch.int16)).abs()
    return ReleaseStats(diff.to(torch.float64).mean(dim=1), (diff > 0).to(torch.float64).mean(dim=1))


def check_release(name: str, clean: torch.Tensor, released: torch.Tensor, *, where: str,
                  clean_digests: dict[bytes, int] | None = None, offset: int = 0) -> ReleaseStats:
    """Checks one released split of a claimed mechanism against its clean images.

    Args:
        name: The mechanism (for messages).
        clean: The clean uint8 images [N, C, H, W], in release order.
        released: What the mechanism released for them.
        where: What was released (``fewshot_synth_faces test, epsilon=1, stream sweep 2``), for messages.
        clean_digests: Digests of every clean image of the split (:func:`image_digests`); default: of ``clean``.
        offset: Index of ``clean[0]`` in what ``where`` names (for messages).

    Returns:
        The per-image change, for :func:`check_outliers` over a whole sweep.

    Raises:
        ReleaseCheckError: An image equals its input or a clean image (``unchanged``, ``clean_copy``).
    """
    if released.shape != clean.shape:
        raise ReleaseCheckError(f"release check unchanged: {name} released shape {tuple(released.shape)} for "
                                f"{tuple(clean.shape)} ({where})")
    flat_in, flat_out = clean.reshape(len(clean), -1), released.reshape(len(released), -1)
    same = (flat_in == flat_out).all(dim=1).nonzero().flatten()
    if len(same):
        first = int(same[0]) + offset
        raise ReleaseCheckError(f"release check unchanged: {name} released image {first} of {where} exactly as it "
                                f"came ({len(same)} such image(s) of {len(clean)}); a claimed mechanism noises every image")
    digests = image_digests(clean) if clean_digests is None else clean_digests
    for i, digest in enumerate(digest_list(released)):
        if digest in digests:
            raise ReleaseCheckError(f"release check clean_copy: {name} released image {i + offset} of {where} "
                                    f"byte-equal to clean image {digests[digest]} of the split")
    return release_stats(clean, released)


def check_outliers(name: str, stats: ReleaseStats, where: str, ratio: float = OUTLIER_RATIO) -> None:
    """Refuses a release in which an image was changed far less than the bulk.

    Raises:
        ReleaseCheckError: An image's mean absolute change and fraction of changed values are
            both below ``ratio`` times their medians (``noise_outlier``, the first such image named).
    """
    if len(stats.mean_abs) < 8:
        return
    mad, frac = float(stats.mean_abs.median()), float(stats.changed.median())
    low = ((stats.mean_abs < ratio * mad) & (stats.changed < ratio * frac)).nonzero().flatten()
    if len(low):
        i = int(low[0])
        raise ReleaseCheckError(
            f"release check noise_outlier: {name} changed image {i} of {where} by {stats.mean_abs[i]:.3g} on average "
            f"({100 * stats.changed[i]:.2g}% of its values), under {ratio:g} x the release's median "
            f"({mad:.3g}, {100 * frac:.2g}%); {len(low)} such image(s) of {len(stats.mean_abs)}: a claimed "
            "mechanism's noise does not depend on the image")


def sweep_images(split_len: int, image_values: int) -> int:
    """Returns how many images the stream sweep releases for a split (its own at least once)."""
    budget = max(MIN_SWEEP_IMAGES, min(SWEEP_IMAGES, SWEEP_VALUES // max(1, image_values)))
    return max(split_len, budget)


def _passes(split: ImageSet, total: int) -> Iterator[tuple[int, ImageSet]]:
    """Yields (pass number, images) covering ``total`` images: the split, then repeats of it (the last one cut)."""
    done, k = 0, 0
    while done < total:
        count = min(len(split), total - done)
        yield k, split if count == len(split) else split.subset(slice(0, count))
        done += count
        k += 1


def release_sweep(name: str, mechanism: Mechanism, split: ImageSet, ctx: RunContext, *, purpose: str,
                  where: str, total: int | None = None) -> int:
    """Releases a split through the guarded release path and checks every pass; returns the images checked.

    Pass 0 draws from ``purpose`` (a cell's own streams: ``release/test``); pass k > 0 from
    ``gate/sweep{k}/<purpose>``, until ``total`` images (default :func:`sweep_images`).

    Raises:
        ReleaseCheckError: A pass fails :func:`check_release` or :func:`check_outliers`.
    """
    if not isinstance(split.images, torch.Tensor):  # a split kept on disk: read once
        split = split.subset(slice(0, len(split)))
    total = total or sweep_images(len(split), math.prod(split.images.shape[1:]))
    digests = image_digests(split.images)
    done = 0
    for k, part in _passes(split, total):
        streams = purpose if k == 0 else f"gate/sweep{k}/{purpose}"
        released, _ = apply_to_split(mechanism, part, ctx, streams)
        label = where if k == 0 else f"{where}, stream sweep {k}"
        stats = check_release(name, part.images, released, where=label, clean_digests=digests)
        check_outliers(name, stats, label)
        done += len(part)
    return done
