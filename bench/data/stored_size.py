"""Where a dataset of user images is stored: at the images' own size and channels, never resized for a profile.

A mechanism runs on the pixels a user would publish (as ``bench release`` runs it), so the
stored size is the images' own: profiles change how many images a cell uses and what the
task's networks see after the release, never this size. :func:`survey` reads every
image's header (no pixels: its size after the EXIF orientation and whether it has one
channel), and :func:`storage_size` picks the stored size from it:

- ``size`` unset (the default): the images' smallest common size, per axis the smallest
  image's side, so that every image is only cropped and downscaled, and a folder of images
  of one size is stored exactly as it is;
- ``size`` set by the user (a declared preprocessing, as a crop is): at most ``size``
  (after the centre crop to its aspect ratio), the smallest common size where some image
  is smaller.

One tiny image does not shrink every other: images with a side below half the median
image's are left out of the minimum, and they are the ones still upscaled, counted and
named (a warning says how to avoid it).

Images are kept in one tensor per split, so they share one size: per-image sizes would
need every task, adversary and release to take ragged batches. A folder whose images all
have one channel (grey, 16-bit grey, grey with alpha, bilevel) is stored grey.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
from PIL import Image, UnidentifiedImageError

from bench.data.imageio import ONE_CHANNEL
from bench.errors import BenchError

_ROTATING = {5, 6, 7, 8}
EXAMPLES = 5


@dataclass(frozen=True)
class Survey:
    """What the images' headers say.

    Attributes:
        natives: int64 [N, 2] (height, width) after the EXIF orientation where it applies.
        grey: Whether every image has one channel.
    """

    natives: np.ndarray
    grey: bool


@dataclass(frozen=True)
class Storage:
    """The stored size and channels of a dataset, and the images that still need upscaling.

    Attributes:
        size: Stored (height, width).
        grey: Store one channel.
        upscaled: Images enlarged to reach ``size`` (their crop is smaller on some side).
        examples: Up to five of them, as ``name (HxW)``.
        smallest: (height, width) of the smallest image.
    """

    size: tuple[int, int]
    grey: bool
    upscaled: int = 0
    examples: tuple[str, ...] = ()
    smallest: tuple[int, int] = (0, 0)

    def info(self, target: Sequence[int] | None) -> dict:
        """Returns the facts a loader records in its info (``storage``; ``target`` None: native size)."""
        return {"target": None if target is None else [int(target[0]), int(target[1])], "stored": list(self.size),
                "channels": 1 if self.grey else 3, "upscaled": self.upscaled, "upscaled_examples": list(self.examples),
                "smallest": list(self.smallest)}


def survey(items: Iterable[tuple[str, bytes | Path]], oriented: bool = True) -> Survey:
    """Reads every image's header (size, mode, EXIF orientation) without decoding pixels.

    Args:
        items: (name for errors, file or encoded bytes) of each image, in order.
        oriented: Swap height and width where the EXIF orientation rotates the image.

    Raises:
        BenchError: An image PIL cannot open (naming it).
    """
    natives, grey = [], True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        for name, source in items:
            try:
                with Image.open(io.BytesIO(source) if isinstance(source, (bytes, bytearray, memoryview))
                                else source) as image:
                    width, height = image.size
                    if oriented and image.getexif().get(0x0112, 1) in _ROTATING:
                        width, height = height, width
                    grey = grey and image.mode in ONE_CHANNEL
            except UnidentifiedImageError:
                raise BenchError(f"cannot read image {name}: not an image PIL recognises") from None
            except Exception as exc:  # damaged headers fail in many ways inside PIL
                why = " ".join(str(exc).split())
                raise BenchError(f"cannot read image {name}: {type(exc).__name__}: {why}") from None
            natives.append((height, width))
    return Survey(np.asarray(natives, dtype=np.int64).reshape(-1, 2), grey and bool(natives))


def crop_sizes(natives: np.ndarray, size: Sequence[int]) -> np.ndarray:
    """Returns [N, 2] (height, width) of each image's centre crop to the aspect ratio of ``size``."""
    from bench.data.imageread import crop_box

    out = [crop_box(int(h), int(w), size)[3:1:-1] for h, w in np.asarray(natives).reshape(-1, 2)]
    return np.asarray(out, dtype=np.int64).reshape(-1, 2)


def storage_size(natives: np.ndarray, names: Sequence[str], target: Sequence[int] | None, grey: bool,
                 own_size: bool = True) -> Storage:
    """Picks the stored size: the images' smallest common size, at most ``target`` where one is given.

    Args:
        natives: [N, 2] native (height, width).
        names: The images' names (for the upscaled examples).
        target: The user's ``size`` option: the most the images are stored at; None (the
            default) stores them at their own size, however large.
        grey: Store one channel.
        own_size: False keeps ``target`` whatever the images' sizes (for a network built for
            that size), upscaling what is smaller.
    """
    natives = np.asarray(natives, dtype=np.int64).reshape(-1, 2)
    if target is None:
        if not len(natives):
            raise BenchError("no images to store")
        own_size, target = True, tuple(int(v) for v in natives.max(axis=0))
    target = (int(target[0]), int(target[1]))
    if not len(natives):
        return Storage(target, grey)
    size = target
    if own_size and (crop_sizes(natives, target) < np.asarray(target)).any():
        floor = np.ceil(np.median(natives, axis=0) / 2).astype(np.int64)
        common = natives[(natives >= floor).all(axis=1)].min(axis=0)  # the median image is never below its half
        size = (min(int(common[0]), target[0]), min(int(common[1]), target[1]))
    small = (crop_sizes(natives, size) < np.asarray(size)).any(axis=1)
    examples = tuple(f"{names[i]} ({natives[i, 0]}x{natives[i, 1]})" for i in np.nonzero(small)[0][:EXAMPLES])
    smallest = natives[int(np.argmin(natives.prod(axis=1)))]
    return Storage(size, grey, int(small.sum()), examples, (int(smallest[0]), int(smallest[1])))


def channels_of(grey: bool | None, found: Survey) -> bool:
    """Returns whether to store one channel: the ``grey`` option where set, else what the survey found."""
    return found.grey if grey is None else bool(grey)


def resolve(items: Iterable[tuple[str, bytes | Path]], target: Sequence[int] | None, grey: bool | None,
            own_size: bool = True, oriented: bool = True) -> Storage:
    """Surveys the images and returns where they are stored.

    Args:
        items: (name, file or encoded bytes) of each image, in order.
        target: The ``size`` option: the most images are stored at; None: their own size.
        grey: The ``grey`` option: True or False overrides, None detects it.
        own_size: Store images smaller than ``target`` at their own size (:func:`storage_size`);
            false keeps ``target`` (for a network built for that size), upscaling what is smaller.
        oriented: As for :func:`survey`.
    """
    names: list[str] = []

    def named() -> Iterable[tuple[str, bytes | Path]]:
        for name, source in items:
            names.append(name)
            yield name, source

    found = survey(named(), oriented)
    return storage_size(found.natives, names, target, channels_of(grey, found), own_size)


def upscaling_warning(chain: dict, dataset: str) -> str:
    """Returns the warning for images upscaled before the mechanism ran, saying how to avoid it."""
    h, w = chain["stored"]
    smallest = chain["native"]["min"]
    examples = f" (e.g. {', '.join(chain['upscaled_examples'][:3])})" if chain.get("upscaled_examples") else ""
    return (f"{chain['upscaled']} {dataset} image(s) were upscaled to {h}x{w} before the mechanism ran{examples}; "
            f"smallest native {smallest[0]}x{smallest[1]}: the mechanism sees interpolated pixels there; to avoid it, "
            f"remove those images or store every image at most that small with --set task.data.size="
            f"{smallest[0]}x{smallest[1]} (the task's networks resize after the release)")
