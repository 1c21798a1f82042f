"""Image files into stored pixels: the one reader of every real dataset of user images.

An image (a file, or encoded bytes from a table) is opened with PIL in any format it reads,
its EXIF orientation applied (except where a dataset's annotations are in stored pixels,
as ImageNet's are) and its mode converted to 8-bit RGB by
:func:`bench.data.imageio.to_rgb` (grey, palette, CMYK, 16-bit scaled by 1/257, alpha
composited over white, an ICC profile to sRGB), optionally reduced to one grey channel,
and fitted to the stored size: centre-cropped to the stored aspect ratio, then resized
with an antialiasing bilinear filter. Large JPEGs are decoded at a reduced scale that
still covers the stored size (``draft``), which changes no size that is recorded.

:func:`decode_stream` decodes images chunk by chunk in threads, so a folder larger than
memory streams through; :func:`write_selection` writes a loader's selection into a
:class:`~bench.data.base.SplitsSink` and reports native sizes, upscaling and
byte-identical duplicates across splits (:func:`warn_about` prints them).
"""

from __future__ import annotations

import io
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

from bench.errors import BenchError
from bench.system.cpus import usable_cpus

CHUNK = 256
"""Images decoded (and held in memory) at a time."""

_NOT_RASTER = {"BUFR", "EPS", "FITS", "GBR", "GRIB", "HDF5", "IPTC", "MPEG", "PCD", "WMF"}
_ROTATING = {5, 6, 7, 8}  # EXIF orientations that swap width and height


@lru_cache(maxsize=1)
def image_suffixes() -> frozenset[str]:
    """Returns the file suffixes (lower case, with the dot) of raster formats PIL can open."""
    Image.init()
    found = {ext for ext, fmt in Image.registered_extensions().items()
             if (fmt in Image.OPEN or fmt == "MPO") and fmt not in _NOT_RASTER}
    return frozenset(found)


def crop_box(height: int, width: int, size: Sequence[int]) -> tuple[int, int, int, int]:
    """Returns the centre crop (left, top, width, height) of an image with the stored aspect ratio.

    Args:
        height: Image height.
        width: Image width.
        size: Stored (height, width).
    """
    out_h, out_w = int(size[0]), int(size[1])
    if width * out_h > height * out_w:  # wider than the target: crop the sides
        crop_w, crop_h = max(1, round(height * out_w / out_h)), height
    else:
        crop_w, crop_h = width, max(1, round(width * out_h / out_w))
    return (width - crop_w) // 2, (height - crop_h) // 2, crop_w, crop_h


@dataclass(frozen=True)
class Fitted:
    """One image read and fitted to the stored size.

    Attributes:
        pixels: uint8 [C, H, W] (C = 1 for grey, else 3).
        native: (height, width), after the EXIF orientation where it is applied.
        crop: (left, top, width, height) of the region that was resized, in native pixels.
        digest: xxh3-64 of the encoded bytes (finds byte-identical files).
    """

    pixels: np.ndarray
    native: tuple[int, int]
    crop: tuple[int, int, int, int]
    digest: bytes


def read_image(source: bytes | Path, size: Sequence[int], grey: bool = False, name: str | None = None,
               oriented: bool = True) -> Fitted:
    """Reads one image and fits it to the stored size.

    Args:
        source: A file, or the encoded bytes of an image.
        size: Stored (height, width).
        grey: Keep one grey channel (ITU-R 601 luma) instead of RGB.
        name: What to call the image in an error (default: the file).
        oriented: Apply the EXIF orientation (false: pixels in stored order, the frame in
            which an official dataset's boxes are given).

    Raises:
        BenchError: The image cannot be read or decoded; the message names it.
    """
    import xxhash

    name = name or (str(source) if isinstance(source, (str, Path)) else "<encoded bytes>")
    try:
        data = source if isinstance(source, (bytes, bytearray, memoryview)) else Path(source).read_bytes()
    except OSError as exc:
        raise BenchError(f"cannot read image {name}: {exc.strerror or exc}") from None
    from bench.data.imageio import to_rgb

    try:
        with Image.open(io.BytesIO(data)) as image:
            orientation = image.getexif().get(0x0112, 1) if oriented else 1
            width, height = image.size
            if orientation in _ROTATING:
                width, height = height, width
            crop = crop_box(height, width, size)
            _draft(image, (width, height), crop, size, orientation in _ROTATING)
            image.load()
            rgb = to_rgb(image, oriented)
    except UnidentifiedImageError:
        raise BenchError(f"cannot read image {name}: not an image PIL recognises") from None
    except BenchError as exc:
        raise BenchError(f"cannot read image {name}: {exc}") from None
    except Exception as exc:  # a damaged file fails in many ways inside PIL (truncation, bad EXIF, bombs)
        raise BenchError(f"cannot read image {name}: {type(exc).__name__}: {' '.join(str(exc).split())}") from None
    pixels = _resize(rgb, (width, height), crop, size, grey)
    return Fitted(pixels, (height, width), crop, xxhash.xxh3_64_digest(data))


def _draft(image: Image.Image, native_wh: tuple[int, int], crop: tuple[int, int, int, int], size: Sequence[int],
           swapped: bool) -> None:
    """Asks a JPEG decoder for the smallest DCT scale whose crop still covers the stored size."""
    scale = max(int(size[1]) / crop[2], int(size[0]) / crop[3])
    if scale >= 0.5:
        return
    want = (int(np.ceil(native_wh[0] * scale)), int(np.ceil(native_wh[1] * scale)))
    image.draft(None, want[::-1] if swapped else want)


def _resize(rgb: np.ndarray, native_wh: tuple[int, int], crop: tuple[int, int, int, int], size: Sequence[int],
            grey: bool) -> np.ndarray:
    """Crops the native region (scaled to a drafted decode) and resizes it; returns [C, H, W]."""
    image = Image.fromarray(rgb)
    if grey:
        image = image.convert("L")
    fx, fy = image.width / native_wh[0], image.height / native_wh[1]
    left, top, w, h = crop
    box = (round(left * fx), round(top * fy), round((left + w) * fx), round((top + h) * fy))
    if box != (0, 0, image.width, image.height):
        image = image.crop(box)
    out_h, out_w = int(size[0]), int(size[1])
    if image.size != (out_w, out_h):
        image = image.resize((out_w, out_h), Image.Resampling.BILINEAR)
    pixels = np.asarray(image, dtype=np.uint8)
    return pixels[None] if pixels.ndim == 2 else pixels.transpose(2, 0, 1)


@dataclass
class Decoded:
    """A chunk of decoded images.

    Attributes:
        pixels: uint8 [n, C, H, W].
        natives: int64 [n, 2] native (height, width).
        crops: int64 [n, 4] (left, top, width, height) of the resized regions.
        digests: Byte digests of the encoded images.
    """

    pixels: torch.Tensor
    natives: np.ndarray
    crops: np.ndarray
    digests: list[bytes]


def decode_stream(items: Iterable[tuple[str, bytes | Path]], size: Sequence[int], grey: bool = False,
                  chunk: int = CHUNK, oriented: bool = True) -> Iterator[Decoded]:
    """Decodes (name, source) items in order, ``chunk`` at a time, in threads.

    Args:
        items: Image name (for errors) and file or encoded bytes; read lazily, in order.
        size: Stored (height, width).
        grey: One grey channel instead of RGB.
        chunk: Images per yielded chunk.
        oriented: Apply each image's EXIF orientation (see :func:`read_image`).

    Raises:
        BenchError: An image cannot be read; the message names it.
    """
    workers = max(1, min(4, usable_cpus()))
    with warnings.catch_warnings(), ThreadPoolExecutor(max_workers=workers) as pool:
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # huge photos are fine; bombs still fail
        batch: list[tuple[str, bytes | Path]] = []
        for item in items:
            batch.append(item)
            if len(batch) == chunk:
                yield _decode_batch(pool, batch, size, grey, oriented)
                batch = []
        if batch:
            yield _decode_batch(pool, batch, size, grey, oriented)


def _decode_batch(pool: ThreadPoolExecutor, batch: list[tuple[str, bytes | Path]], size: Sequence[int],
                  grey: bool, oriented: bool) -> Decoded:
    fitted = list(pool.map(lambda item: read_image(item[1], size, grey, item[0], oriented), batch))
    return Decoded(
        pixels=torch.from_numpy(np.stack([f.pixels for f in fitted])),
        natives=np.array([f.native for f in fitted], dtype=np.int64).reshape(-1, 2),
        crops=np.array([f.crop for f in fitted], dtype=np.int64).reshape(-1, 4),
        digests=[f.digest for f in fitted],
    )


def fit_boxes(boxes: np.ndarray, crop: Sequence[int], size: Sequence[int]) -> torch.Tensor:
    """Maps (x1, y1, x2, y2) boxes in native pixels through the crop and resize, clipped to the image.

    Boxes left with no area (outside the crop) are dropped.

    Returns:
        float32 [k, 4] boxes in stored pixels.
    """
    left, top, w, h = (float(v) for v in crop)
    out_h, out_w = float(size[0]), float(size[1])
    b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4).copy()
    b[:, 0::2] = np.clip((b[:, 0::2] - left) * (out_w / w), 0, out_w)
    b[:, 1::2] = np.clip((b[:, 1::2] - top) * (out_h / h), 0, out_h)
    keep = (b[:, 2] > b[:, 0]) & (b[:, 3] > b[:, 1])
    return torch.from_numpy(b[keep]).float().reshape(-1, 4)


@dataclass
class Selection:
    """What a loader decodes: images in reading order with their split, label and annotations.

    Attributes:
        splits: The split names to write (each written, even when empty).
        names: One name per image (its file, or table row), for messages.
        split_of: The split of each image.
        labels: The class (identity) of each image.
        attrs: Attribute -> one code per image (-1: unlabelled).
        attr_names: Attribute -> names of its codes.
        boxes: One float [k, 4] array of (x1, y1, x2, y2) native pixels per image, or None.
    """

    splits: tuple[str, ...]
    names: list[str]
    split_of: list[str]
    labels: list[int]
    attrs: dict[str, list[int]] = field(default_factory=dict)
    attr_names: dict[str, list[str]] = field(default_factory=dict)
    boxes: list[np.ndarray] | None = None

    def count(self, split: str) -> int:
        """Images of a split."""
        return sum(s == split for s in self.split_of)


def write_selection(sink: Any, selection: Selection, sources: Iterable[bytes | Path], size: Sequence[int],
                    grey: bool = False, rotations: int = 1, with_crops: bool = False,
                    oriented: bool = True) -> dict[str, Any]:
    """Decodes a selection chunk by chunk into a sink and describes every split.

    Args:
        sink: The :class:`~bench.data.base.SplitsSink` of the cache entry.
        selection: The images and their metadata, in reading order.
        sources: The file or encoded bytes of each image, in the same order (read lazily).
        size: Stored (height, width).
        grey: Store one grey channel.
        rotations: Copies of each image rotated by multiples of 90 degrees (1: none); copy
            r of an image of label c gets label ``c * rotations + r`` (Omniglot's augmentation).
        with_crops: Also return ``crops``: int64 [N, 4] (left, top, width, height), the region
            of each original image that was stored, in reading order (to fit annotations
            that arrive later with :func:`fit_boxes`).
        oriented: Apply each image's EXIF orientation (see :func:`read_image`).

    Returns:
        Info: ``images`` (:func:`bench.data.base.size_report`) and ``duplicates``
        (and ``crops``, see ``with_crops``).
    """
    from bench.data.base import size_report

    if rotations > 1 and (selection.boxes is not None or size[0] != size[1]):
        raise ValueError("rotations need square images without boxes")
    channels = 1 if grey else 3
    writers = {s: sink.images(s, (channels, int(size[0]), int(size[1]))) for s in selection.splits}
    natives, crops, digests = [], [], []
    start = 0
    items = zip(selection.names, sources)
    for chunk in decode_stream(items, size, grey, oriented=oriented):
        n = len(chunk.digests)
        where = np.array(selection.split_of[start : start + n])
        for split, writer in writers.items():
            picked = chunk.pixels[torch.from_numpy(np.nonzero(where == split)[0])]
            if rotations > 1:
                picked = torch.stack([torch.rot90(picked, r, dims=(2, 3)) for r in range(rotations)], 1)
                picked = picked.reshape(-1, *picked.shape[2:])
            if len(picked):
                writer.add(picked)
        natives.append(chunk.natives)
        crops.append(chunk.crops)
        digests.extend(chunk.digests)
        start += n
    if start != len(selection.names):
        raise ValueError(f"{len(selection.names)} images selected but {start} sources given")
    natives_a = np.concatenate(natives) if natives else np.zeros((0, 2), np.int64)
    crops_a = np.concatenate(crops) if crops else np.zeros((0, 4), np.int64)
    for split in selection.splits:
        _describe(sink, selection, split, crops_a, size, rotations)
    out = {"images": size_report(natives_a, crops_a[:, [3, 2]], size),
           "duplicates": duplicates(selection.names, selection.split_of, digests)}
    if with_crops:
        out["crops"] = crops_a
    return out


def _describe(sink: Any, selection: Selection, split: str, crops: np.ndarray, size: Sequence[int],
              rotations: int) -> None:
    index = [i for i, s in enumerate(selection.split_of) if s == split]
    labels = torch.tensor([selection.labels[i] for i in index], dtype=torch.int64).reshape(-1)
    if rotations > 1:
        labels = (labels[:, None] * rotations + torch.arange(rotations)).reshape(-1)
        index = [i for i in index for _ in range(rotations)]
    attrs = {k: torch.tensor([v[i] for i in index], dtype=torch.int64).reshape(-1) for k, v in selection.attrs.items()}
    boxes = None
    if selection.boxes is not None:
        boxes = [fit_boxes(selection.boxes[i], crops[i], size) for i in index]
    sink.describe(split, labels=labels, attrs=attrs, attr_names=dict(selection.attr_names), boxes=boxes)


def duplicates(names: Sequence[str], split_of: Sequence[str], digests: Sequence[bytes],
               examples: int = 5) -> dict[str, Any]:
    """Finds byte-identical images that sit in different splits (their content leaks across).

    Returns:
        ``across_splits``: images whose bytes equal an image's of another split (each
        counted once, after the first), and ``examples``: up to ``examples`` pairs
        ``"a (train) = b (test)"``.
    """
    first: dict[bytes, int] = {}
    found: list[str] = []
    count = 0
    for i, digest in enumerate(digests):
        j = first.setdefault(digest, i)
        if j != i and split_of[j] != split_of[i]:
            count += 1
            if len(found) < examples:
                found.append(f"{names[j]} ({split_of[j]}) = {names[i]} ({split_of[i]})")
    return {"across_splits": count, "examples": found}


def warn_about(dataset: str, info: dict[str, Any]) -> None:
    """Prints one warning line for images byte-identical across splits.

    Images upscaled to the stored size are warned about by the runner, for every dataset
    (:func:`bench.cell.data.image_chain`).
    """
    from bench.storage.cache import warn

    dup = info.get("duplicates") or {}
    if dup.get("across_splits"):
        warn(f"{dataset}: {dup['across_splits']} image(s) are byte-identical to an image of another split "
             f"(e.g. {dup['examples'][0]}): those splits are not disjoint in content")
