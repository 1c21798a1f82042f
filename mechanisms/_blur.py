"""Gaussian blur with the semantics of Pillow's ``ImageFilter.GaussianBlur``, bit for bit.

Pillow runs three extended box passes along x, then three along y, each rounding to 8
bits with edge pixels replicated. On the CPU the images go through Pillow itself
(:mod:`mechanisms._pil_blur`); on other devices the same integer arithmetic runs as
batched torch code, chunk by chunk, with the grouping by box radius decided on the host
before any kernel runs (no device-to-host synchronisation).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch

from mechanisms._ops import chunk_values
from mechanisms._pil_blur import pil_blend, pil_blur

BACKENDS = ("auto", "pil", "torch")
"""``auto``: Pillow on the CPU, torch elsewhere; ``pil`` and ``torch`` force one (tests)."""
_BLUR_PASSES = 3
_BLUR_SLICE_MAX = 4
_IDENTITY = (0, 1 << 24, 0)


def div255_(values: torch.Tensor) -> torch.Tensor:
    """Pillow's exact rounding of v / 255 for v in [0, 255^2], in place."""
    values += 128
    values += values >> 8
    values >>= 8
    return values


def pil_box_radius(radius: float, passes: int = _BLUR_PASSES) -> np.float32:
    """Returns the extended-box radius Pillow uses for ``GaussianBlur(radius)``.

    Pillow approximates a Gaussian of standard deviation ``radius`` by ``passes``
    extended box filters (Gwosdek et al. 2011); this is ``_gaussian_blur_radius`` of
    Pillow's ``BoxBlur.c`` in the same float32 arithmetic.

    Args:
        radius: The Gaussian's standard deviation (PIL's ``radius``), >= 0.
        passes: Number of box passes per axis (Pillow uses 3).
    """
    f = np.float32
    r = f(radius)
    sigma2 = f(r * r / f(passes))
    length = f(math.sqrt(12.0 * float(sigma2) + 1.0))
    whole = f(math.floor((float(length) - 1.0) / 2.0))
    frac = (f(2) * whole + f(1)) * (whole * (whole + f(1)) - f(3) * sigma2)
    frac = frac / (f(6) * (sigma2 - (whole + f(1)) * (whole + f(1))))
    return f(whole + frac)


def pil_box_weights(radius: float) -> tuple[int, int, int]:
    """Returns Pillow's fixed-point weights of one extended box pass.

    Args:
        radius: PIL ``GaussianBlur`` radius.

    Returns:
        (integer box radius r, weight of the 2r+1 inner pixels, weight of the two edge
        pixels), in units of 2^-24, as ``ImagingHorizontalBoxBlur`` computes them.
    """
    box = pil_box_radius(radius)
    whole = int(box)
    inner = int(np.float32(1 << 24) / (box * np.float32(2) + np.float32(1)))
    edge = ((1 << 24) - (2 * whole + 1) * inner) // 2
    return whole, inner, edge


def _box_pass(x: torch.Tensor, whole: int, inner: torch.Tensor | int, edge: torch.Tensor | int) -> torch.Tensor:
    """One extended box pass along axis -2, edges replicated, rounded like Pillow.

    Pillow computes ``(acc * inner + far * edge + 2^23) >> 24`` in 32-bit unsigned
    arithmetic; splitting both weights into high and low bytes keeps every intermediate
    inside int32 and gives the same integer.

    Args:
        x: int32 [..., L, M] with values in 0..255.
        whole: Integer box radius r.
        inner: Weight of the 2r+1 inner pixels (an int, or a tensor broadcasting over x).
        edge: Weight of the two edge pixels.

    Returns:
        int32 [..., L, M] with values in 0..255.
    """
    length = x.shape[-2]
    if whole >= length - 1:
        window, far = _whole_line_window(x, whole)
        high = window * (inner >> 8) + far * (edge >> 8)
        low = window * (inner & 255) + far * (edge & 255)
        return (high + ((low + (1 << 23)) >> 8)) >> 16
    index = torch.arange(-whole - 1, length + whole + 1, device=x.device).clamp_(0, length - 1)
    padded = x.index_select(-2, index)
    if whole <= _BLUR_SLICE_MAX:
        window = padded.narrow(-2, 1, length).clone()
        for k in range(2, 2 * whole + 2):
            window += padded.narrow(-2, k, length)
    else:
        csum = padded.cumsum(-2, dtype=torch.int32)
        window = csum.narrow(-2, 2 * whole + 1, length) - csum.narrow(-2, 0, length)
    far = padded.narrow(-2, 0, length) + padded.narrow(-2, 2 * whole + 2, length)
    high = window * (inner >> 8) + far * (edge >> 8)
    low = window * (inner & 255) + far * (edge & 255)
    return (high + ((low + (1 << 23)) >> 8)) >> 16


def _whole_line_window(x: torch.Tensor, whole: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The window sums and edge pairs of :func:`_box_pass` when every window spans the whole line (r >= L - 1).

    Window i then holds the line once, its first value r - i more times and its last
    i + r - L + 1 more times, and both edge pixels are the line's ends: O(L) for any radius,
    where padding the line would take O(L + 2r) (a radius of 1e9 asks for lines of 2e9
    values). The sums wrap to int32 as the padded cumulative sum does.
    """
    length = x.shape[-2]
    first, last = x.narrow(-2, 0, 1).long(), x.narrow(-2, length - 1, 1).long()
    i = torch.arange(length, device=x.device, dtype=torch.int64).view(length, 1)
    window = x.long().sum(-2, keepdim=True) + (whole - i) * first + (i + whole - length + 1) * last
    return window.to(torch.int32), (first + last).to(torch.int32).expand_as(x)


def _blur_group(x: torch.Tensor, whole: int, inner: torch.Tensor, edge: torch.Tensor) -> torch.Tensor:
    """Blurs images sharing one integer box radius: three passes along x, then three along y."""
    view = (-1,) + (1,) * (x.dim() - 1)
    inner, edge = inner.view(view), edge.view(view)
    out = x.transpose(-1, -2).to(torch.int32, memory_format=torch.contiguous_format)
    for _ in range(_BLUR_PASSES):
        out = _box_pass(out, whole, inner, edge)
    out = out.transpose(-1, -2).contiguous()
    for _ in range(_BLUR_PASSES):
        out = _box_pass(out, whole, inner, edge)
    return out.to(torch.uint8)


def _radii(radius: float | Sequence[float] | torch.Tensor, n: int) -> np.ndarray:
    """Returns one float64 radius per image, on the host."""
    if isinstance(radius, (int, float)):
        return np.full(n, float(radius))
    radii = torch.as_tensor(radius, dtype=torch.float64).reshape(-1).cpu().numpy()
    if radii.size != n:
        raise ValueError(f"expected {n} radii, got {radii.size}")
    return radii


def _weight_table(radii: np.ndarray) -> np.ndarray:
    """Returns Pillow's (box radius, inner, edge) weights of every image: int64 [N, 3]."""
    unique, inverse = np.unique(radii, return_inverse=True)
    rows = np.array([pil_box_weights(float(r)) for r in unique], dtype=np.int64).reshape(-1, 3)
    return rows[inverse.reshape(-1)]


def _torch_blur(images: torch.Tensor, table: np.ndarray, changed: np.ndarray) -> torch.Tensor:
    """Blurs the ``changed`` images group by group of one box radius, in chunks of the batch."""
    out = images.clone()
    chunk = max(1, chunk_values(images.device) // max(1, images[0].numel()))
    weights = torch.from_numpy(table[:, 1:].astype(np.int32)).to(images.device, non_blocking=True)
    for whole in np.unique(table[changed, 0]).tolist():
        pick = np.flatnonzero(changed & (table[:, 0] == whole))
        contiguous = pick[-1] - pick[0] + 1 == len(pick)
        for start in range(0, len(pick), chunk):
            part = pick[start : start + chunk]
            if contiguous:
                rows = slice(int(part[0]), int(part[-1]) + 1)
            else:
                rows = torch.from_numpy(part).to(images.device, non_blocking=True)
            w = weights[rows]
            out[rows] = _blur_group(images[rows], int(whole), w[:, 0], w[:, 1])
    return out


def blend_blurred(images: torch.Tensor, keep: torch.Tensor, rows: torch.Tensor, radius: torch.Tensor,
                  backend: str = "auto") -> torch.Tensor:
    """Blends images with their blur through blurred masks, as Pillow's ``Image.composite`` does.

    Image ``rows[j]`` becomes ``(I_b (255 - M_b) + I M_b) / 255`` (Pillow's rounding), where
    ``I_b`` and ``M_b`` are the image and ``keep[j]`` blurred by ``GaussianBlur(radius[j])``.

    Args:
        images: uint8 [N, C, H, W].
        keep: uint8 [F, 1, H, W] masks, 255 where the image stays as it is.
        rows: int64 [F] distinct indices of the images to blend, on the host.
        radius: float64 [F] their blur radii, on the host.
        backend: One of :data:`BACKENDS`.

    Returns:
        uint8 [N, C, H, W], a new tensor; the other images unchanged.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if (default_backend(images.device) if backend == "auto" else backend) == "pil":
        return pil_blend(images.cpu(), keep.cpu(), rows.numpy(), radius.numpy()).to(images.device)
    index = rows.to(images.device, non_blocking=True)
    chosen = images.index_select(0, index)
    # The mask is blurred as one more channel of its image: one blur for both.
    both = gaussian_blur(torch.cat([chosen, keep], 1), radius, "torch").to(torch.int32)
    soft = both[:, -1:]
    mixed = both[:, :-1].mul_(255 - soft).addcmul_(chosen.to(torch.int32), soft)
    return images.clone().index_copy_(0, index, div255_(mixed).to(torch.uint8))


def default_backend(device: torch.device) -> str:
    """Returns the backend ``auto`` picks on a device: ``pil`` on the CPU, ``torch`` elsewhere."""
    return "pil" if device.type == "cpu" else "torch"


def gaussian_blur(
    images: torch.Tensor, radius: float | Sequence[float] | torch.Tensor, backend: str = "auto"
) -> torch.Tensor:
    """Blurs like Pillow's ``ImageFilter.GaussianBlur(radius)``, bit for bit.

    Args:
        images: uint8 [N, C, H, W].
        radius: One radius for the batch, or one per image (0 leaves an image as it is).
        backend: One of :data:`BACKENDS`.

    Returns:
        uint8 [N, C, H, W], a new tensor.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    n = images.shape[0]
    radii = _radii(radius, n)
    table = _weight_table(radii) if n else np.zeros((0, 3), dtype=np.int64)
    changed = (table != np.array(_IDENTITY)).any(1)
    if not changed.any() or images[0].numel() == 0:
        return images.clone()
    if backend == "auto":
        backend = default_backend(images.device)
    if backend == "pil":
        return pil_blur(images.cpu(), radii, changed).to(images.device)
    return _torch_blur(images, table, changed)
