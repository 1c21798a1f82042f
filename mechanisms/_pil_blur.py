"""Pillow's ``GaussianBlur`` over a batch on the CPU: few calls, spread over threads.

Pillow is the reference semantics of the ``blur`` and ``face_blur`` mechanisms and, on the
CPU, faster than any batched rewrite (its box blur is one pass of running sums). What a
batch adds is Python per image, and Pillow's calls hold the GIL between their passes. So:

* images that share a radius are blurred as planes stacked into tall images: two calls
  for the whole stack (:func:`blur_planes`);
* an image with a radius of its own is one call, its channels as the bands of one
  multi-band image (:func:`blur_bands`);
* face_blur's images (each with the radius of its largest face) are blurred with their
  mask as a fourth band and blended by Pillow's masked paste, with no Python per pixel
  (:func:`composite_layer`);
* the work is cut into pieces that a pool of torch's thread count runs side by side
  (:func:`mechanisms._threads.run_tasks`): Pillow releases the GIL while it filters, and
  no torch parallel region runs meanwhile whose spinning threads would take the cores
  from the pool.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch
from PIL import Image, ImageFilter

from mechanisms._threads import run_tasks

CHUNK_VALUES = 1 << 20
"""Most values a piece of work holds: its buffers stay small enough for the allocator to reuse."""

_BAND_MODES = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}


def blur_planes(planes: np.ndarray, radius: float) -> np.ndarray:
    """Blurs every plane of uint8 [P, H, W] (C-contiguous) as Pillow's ``GaussianBlur(radius)`` does.

    Pillow's blur is its x passes and then its y passes, each plane on its own. So the
    planes stacked into one tall mode-L image take the x passes in one call (a row never
    leaves its plane), and their transposes, stacked the same way, the y passes.

    Returns:
        uint8 [P, H, W] (a transposed view).
    """
    count, height, width = planes.shape
    along_x = ImageFilter.GaussianBlur((radius, 0))
    tall = Image.frombuffer("L", (width, count * height), planes, "raw", "L", 0, 1)
    once = np.frombuffer(tall.filter(along_x).tobytes(), np.uint8).reshape(count, height, width)
    turned = np.ascontiguousarray(once.transpose(0, 2, 1))
    tall = Image.frombuffer("L", (height, count * width), turned, "raw", "L", 0, 1)
    twice = np.frombuffer(tall.filter(along_x).tobytes(), np.uint8).reshape(count, width, height)
    return twice.transpose(0, 2, 1)


def blur_bands(image: np.ndarray, radius: float) -> None:
    """Blurs every band of uint8 [H, W, B] (C-contiguous) in place, as ``GaussianBlur(radius)`` blurs each one.

    Pillow blurs the bands of a multi-band image independently, with the arithmetic of a
    single band, so up to four bands take one call.
    """
    height, width, bands = image.shape
    blur = ImageFilter.GaussianBlur(radius)
    for first in range(0, bands, 4):
        part = image[..., first : first + 4]
        part = part if part.flags.c_contiguous else np.ascontiguousarray(part)
        mode = _BAND_MODES[part.shape[-1]]
        blurred = Image.frombuffer(mode, (width, height), part, "raw", mode, 0, 1).filter(blur)
        image[..., first : first + 4] = np.frombuffer(blurred.tobytes(), np.uint8).reshape(height, width, -1)


def _spans(first: int, end: int, step: int) -> list[tuple[int, int]]:
    """Cuts [first, end) into spans of ``step``."""
    return [(a, min(a + step, end)) for a in range(first, end, step)]


def _step(unit_values: int, units: int, threads: int) -> int:
    """Units per piece: at most CHUNK_VALUES values (at least one unit), in rounds of ``threads`` equal pieces."""
    most = max(1, CHUNK_VALUES // max(1, unit_values))
    rounds = -(-units // (threads * most))
    return max(1, -(-units // (threads * max(1, rounds))))


def plan(radii: np.ndarray, changed: np.ndarray) -> tuple[list[tuple[float, int, int]], np.ndarray]:
    """Splits the changed images into runs of consecutive images with one radius.

    Returns:
        (the runs of two or more images as (radius, first, end), the indices of the
        images whose run is themselves alone).
    """
    index = np.flatnonzero(changed)
    runs, singles = [], []
    if not len(index):
        return runs, np.array(singles, dtype=np.int64)
    breaks = np.flatnonzero((np.diff(index) != 1) | (radii[index[1:]] != radii[index[:-1]])) + 1
    for run in np.split(index, breaks):
        if len(run) == 1:
            singles.append(int(run[0]))
        else:
            runs.append((float(radii[run[0]]), int(run[0]), int(run[-1]) + 1))
    return runs, np.array(singles, dtype=np.int64)


def pil_blur(images: torch.Tensor, radii: np.ndarray, changed: np.ndarray) -> torch.Tensor:
    """Blurs the ``changed`` images like Pillow's ``GaussianBlur(radii[i])``, bit for bit.

    Args:
        images: uint8 [N, C, H, W] on the CPU.
        radii: float64 [N] on the host.
        changed: bool [N], the images to blur; the others are copied.

    Returns:
        uint8 [N, C, H, W], a new tensor.
    """
    source = images.contiguous()
    n, channels, height, width = source.shape
    target = torch.empty_like(source)
    if not changed.all():
        keep = torch.from_numpy(np.flatnonzero(~changed))
        target.index_copy_(0, keep, source.index_select(0, keep))
    runs, singles = plan(radii, changed)
    threads = max(1, torch.get_num_threads())
    planes = source.numpy().reshape(n * channels, height, width)
    out = target.numpy().reshape(n * channels, height, width)

    picked = torch.from_numpy(singles)
    loose = source.index_select(0, picked).permute(0, 2, 3, 1).contiguous().numpy()  # [S, H, W, C]

    def strip(radius: float, first: int, end: int) -> None:
        out[first:end] = blur_planes(planes[first:end], radius)

    def bands(first: int, end: int) -> None:
        for j in range(first, end):
            blur_bands(loose[j], float(radii[singles[j]]))

    tasks = []
    step = _step(height * width, sum(end - first for _, first, end in runs) * channels, threads)
    for radius, first, end in runs:
        tasks += [partial(strip, radius, a, b) for a, b in _spans(first * channels, end * channels, step)]
    step = _step(channels * height * width, len(singles), threads)
    tasks += [partial(bands, a, b) for a, b in _spans(0, len(singles), step)]
    run_tasks(tasks)
    if len(singles):
        target.index_copy_(0, picked, torch.from_numpy(loose).permute(0, 3, 1, 2))
    return target


def composite_layer(layer: np.ndarray, radius: float) -> None:
    """Blends one image with its blur through its blurred mask, in place, as ``Image.composite`` does.

    The layer holds up to three image channels in bands 0-2 and the mask (255 where the
    image stays) in band 3. Image and mask are blurred in one call, and Pillow's masked
    paste then computes ``(I_b (255 - M_b) + I M_b) / 255``, per byte, with the rounding of
    ``Image.composite``. These are the C calls behind ``Image.frombuffer``, ``Image.filter``
    and ``Image.paste`` without their Python wrappers: Pillow releases the GIL inside each,
    so pieces on other threads run meanwhile.

    Args:
        layer: uint8 [H, W, 4], C-contiguous and writable.
        radius: The ``GaussianBlur`` radius.
    """
    height, width, _ = layer.shape
    box = (0, 0, width, height)
    mapped = Image.core.map_buffer(layer, (width, height), "raw", 0, ("RGBA", 0, 1))
    blurred = mapped.gaussian_blur((radius, radius), 3)
    blurred.paste(mapped, box, blurred.getband(3))
    mapped.paste(blurred, box)


def pil_blend(images: torch.Tensor, keep: torch.Tensor, rows: np.ndarray, radii: np.ndarray) -> torch.Tensor:
    """Blends images with their blur through blurred masks, as Pillow's ``Image.composite`` does.

    Every three channels of an image take its mask as a fourth band (:func:`composite_layer`);
    a piece of images is gathered into such layers, blended and scattered back while it is
    in cache, and pieces run side by side.

    Args:
        images: uint8 [N, C, H, W] on the CPU.
        keep: uint8 [F, 1, H, W] masks, 255 where the image stays as it is.
        rows: int64 [F] distinct indices of the images to blend.
        radii: float64 [F] their blur radii.

    Returns:
        uint8 [N, C, H, W], a new tensor; the other images unchanged.
    """
    source = images.contiguous().numpy()
    masks = keep.contiguous().numpy()
    target = source.copy()
    _, channels, height, width = source.shape
    groups = -(-channels // 3)
    # Channels short of a multiple of three are zero bands: blurred along, never read.
    new = np.empty if channels % 3 == 0 else np.zeros

    def work(first: int, end: int) -> None:
        chosen = source[rows[first:end]]
        layers = new((end - first, groups, height, width, 4), np.uint8)
        for c in range(channels):
            layers[:, c // 3, :, :, c % 3] = chosen[:, c]
        layers[..., 3] = masks[first:end]
        for j in range(end - first):
            for g in range(groups):
                composite_layer(layers[j, g], float(radii[first + j]))
        for c in range(channels):
            chosen[:, c] = layers[:, c // 3, :, :, c % 3]
        target[rows[first:end]] = chosen

    step = _step(4 * groups * height * width, len(rows), max(1, torch.get_num_threads()))
    run_tasks([partial(work, a, b) for a, b in _spans(0, len(rows), step)])
    return torch.from_numpy(target)
