"""Batched tensor operations shared by the mechanisms.

All functions take uint8 batches [N, C, H, W] and work on the batch's device, with no
Python loop over images or cells: loops here run over the b rows of a cell, over chunks
of a large batch, or over the distinct blur radii of a batch.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch

from bench.streams import Streams

MAX_BLOCK = 4096
"""Largest cell side a pixelating mechanism accepts (larger than any image it is meant for)."""
_BLUR_PASSES = 3
_WORDS = {2: torch.int16, 4: torch.int32, 8: torch.int64}
_BYTE_REPEAT = {2: 0x0101, 4: 0x01010101, 8: 0x0101010101010101}
_EVEN_BYTES = 0x00FF00FF
_PACKED_MAX_BLOCK = 64
_BLUR_CHUNK_VALUES = 1 << 20
_BLUR_SLICE_MAX = 4


def cell_grid(height: int, width: int, block: int) -> tuple[int, int]:
    """Returns the number of cell rows and columns (ragged edge cells included)."""
    return math.ceil(height / block), math.ceil(width / block)


def _sum_groups(x: torch.Tensor, dim: int, block: int, dtype: torch.dtype) -> torch.Tensor:
    size = x.shape[dim]
    full = size // block
    parts = []
    if full:
        groups = x.narrow(dim, 0, full * block).unflatten(dim, (full, block))
        acc = groups.select(dim + 1, 0).to(dtype, copy=True)
        for i in range(1, block):
            acc += groups.select(dim + 1, i)
        parts.append(acc)
    if size > full * block:
        parts.append(x.narrow(dim, full * block, size - full * block).sum(dim, keepdim=True, dtype=dtype))
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim)


def cell_sums(images: torch.Tensor, block: int) -> torch.Tensor:
    """Returns the sum of every b x b cell of every channel.

    Args:
        images: uint8 [N, C, H, W].
        block: Cell side b; ragged edge cells sum the pixels they have.

    Returns:
        Integer tensor [N, C, ceil(H/b), ceil(W/b)] (int16 when it cannot overflow).
    """
    if _packed_sums_apply(images, block):
        return _packed_cell_sums(images, block)
    dtype = torch.int16 if block * block * 255 <= torch.iinfo(torch.int16).max else torch.int32
    rows = _sum_groups(images, 2, block, dtype)
    return _sum_groups(rows, 3, block, dtype)


def _packed_sums_apply(images: torch.Tensor, block: int) -> bool:
    height, width = images.shape[-2:]
    return (
        block % 4 == 0
        and block <= _PACKED_MAX_BLOCK
        and height % block == 0
        and width % block == 0
        and images.is_contiguous()
        and images.storage_offset() % 4 == 0
    )


def _packed_cell_sums(images: torch.Tensor, block: int) -> torch.Tensor:
    """Cell sums for b a multiple of 4, reading four pixels per int32 word.

    Even and odd bytes of every word are summed down the b rows of a cell in separate
    16-bit lanes (at most 2 b 255 < 2^15, so no lane overflows), then the lanes and the
    b/4 words of a cell are added.
    """
    n, c, height, width = images.shape
    words = images.view(torch.int32).view(n, c, height // block, block, width // 4)
    first = words.select(3, 0)
    even, odd = first & _EVEN_BYTES, (first >> 8) & _EVEN_BYTES
    for i in range(1, block):
        row = words.select(3, i)
        even += row & _EVEN_BYTES
        odd += (row >> 8) & _EVEN_BYTES
    lanes = even.add_(odd)
    totals = (lanes & 0xFFFF).add_(lanes >> 16)
    if block == 4:
        return totals
    return totals.view(n, c, height // block, width // block, block // 4).sum(-1, dtype=torch.int32)


def cell_counts(height: int, width: int, block: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Returns the number of pixels of every cell: int32 [ceil(H/b), ceil(W/b)]."""
    rows, cols = cell_grid(height, width, block)
    h = (height - torch.arange(rows, device=device) * block).clamp(max=block)
    w = (width - torch.arange(cols, device=device) * block).clamp(max=block)
    return (h[:, None] * w[None, :]).to(torch.int32)


def fill_cells(cells: torch.Tensor, block: int, height: int, width: int) -> torch.Tensor:
    """Expands one value per cell into an image of the cells' pixels.

    Args:
        cells: Tensor [N, C, ceil(H/b), ceil(W/b)].
        block: Cell side b.
        height: Output height H.
        width: Output width W.

    Returns:
        Contiguous tensor [N, C, H, W] of the cells' dtype.
    """
    n, c, rows_n, cols_n = cells.shape
    rows = _fill_row(cells, block, width)
    out = torch.empty((n, c, height, width), dtype=cells.dtype, device=cells.device)
    full = height // block
    if full:
        target = out[:, :, : full * block].view(n, c, full, block, width)
        target.copy_(rows[:, :, :full].unsqueeze(3).expand(n, c, full, block, width))
    if height > full * block:
        out[:, :, full * block :].copy_(rows[:, :, full:].expand(n, c, height - full * block, width))
    return out


def _fill_row(cells: torch.Tensor, block: int, width: int) -> torch.Tensor:
    """Repeats every cell value b times along the width: [N, C, Hc, W]."""
    n, c, rows_n, cols_n = cells.shape
    word = _WORDS.get(block)
    if cells.dtype == torch.uint8 and word is not None and cols_n * block == width:
        return (cells.to(word) * _BYTE_REPEAT[block]).view(torch.uint8)
    rows = cells.unsqueeze(-1).expand(n, c, rows_n, cols_n, block).reshape(n, c, rows_n, cols_n * block)
    return rows[..., :width]


def rounded_cell_means(images: torch.Tensor, block: int) -> torch.Tensor:
    """Returns every cell's mean rounded half up: int32 [N, C, ceil(H/b), ceil(W/b)].

    Args:
        images: uint8 [N, C, H, W].
        block: Cell side b; a ragged edge cell averages the pixels it has.
    """
    height, width = images.shape[-2:]
    sums = cell_sums(images, block).to(torch.int32)
    counts = cell_counts(height, width, block, images.device)
    return torch.div(2 * sums + counts, 2 * counts, rounding_mode="floor")


def pixelate(images: torch.Tensor, block: int) -> torch.Tensor:
    """Fills every b x b cell with its mean, rounded half up to the nearest integer.

    Args:
        images: uint8 [N, C, H, W].
        block: Cell side b; a ragged edge cell averages the pixels it has.

    Returns:
        uint8 [N, C, H, W], a new tensor.
    """
    if block == 1:
        return images.clone()
    height, width = images.shape[-2:]
    return fill_cells(rounded_cell_means(images, block).to(torch.uint8), block, height, width)


def cell_means(images: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns the exact float32 mean of every cell and the cells' pixel counts.

    Args:
        images: uint8 [N, C, H, W].
        block: Cell side b.

    Returns:
        (float32 [N, C, Hc, Wc] means, int32 [Hc, Wc] counts).
    """
    height, width = images.shape[-2:]
    counts = cell_counts(height, width, block, images.device)
    return cell_sums(images, block).to(torch.float32).div_(counts), counts


def to_uint8(values: torch.Tensor) -> torch.Tensor:
    """Rounds float values half up, clips them to [0, 255] and casts to uint8, overwriting ``values``.

    After adding 1/2 and clipping to [0, 255] every value is non-negative, so the cast's
    truncation is the floor.
    """
    return values.add_(0.5).clamp_(0.0, 255.0).to(torch.uint8)


def draws_by_default(generator: Streams, method: str) -> bool:
    """True when ``generator``'s ``method`` is Streams' own, so a fused kernel may draw in its place.

    A fused kernel draws exactly what the method would (:mod:`bench.rng`); a Streams
    subclass that overrides the method is honoured by calling it instead.
    """
    return getattr(type(generator), method) is getattr(Streams, method)


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


def _blur_chunk(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    wholes = table[:, 0]
    if bool((wholes == wholes[0]).all()):
        return _blur_group(x, int(wholes[0]), table[:, 1], table[:, 2])
    out = torch.empty_like(x)
    for whole in torch.unique(wholes).tolist():
        pick = (wholes == whole).nonzero().flatten()
        rows = table[pick]
        out[pick] = _blur_group(x[pick], int(whole), rows[:, 1], rows[:, 2])
    return out


def _weight_table(radius: float | Sequence[float] | torch.Tensor, n: int) -> torch.Tensor:
    if isinstance(radius, (int, float)):
        return torch.tensor([pil_box_weights(float(radius))], dtype=torch.int64).expand(n, 3)
    radii = torch.as_tensor(radius, dtype=torch.float64).reshape(-1).cpu()
    if radii.numel() != n:
        raise ValueError(f"expected {n} radii, got {radii.numel()}")
    unique, inverse = torch.unique(radii, return_inverse=True)
    rows = torch.tensor([pil_box_weights(float(r)) for r in unique.tolist()], dtype=torch.int64)
    return rows.reshape(-1, 3)[inverse]


def gaussian_blur(images: torch.Tensor, radius: float | Sequence[float] | torch.Tensor) -> torch.Tensor:
    """Blurs like Pillow's ``ImageFilter.GaussianBlur(radius)``, bit for bit.

    Pillow runs three extended box passes along x, then three along y, each rounding to
    8 bits with edge pixels replicated; this reproduces that integer arithmetic.

    Args:
        images: uint8 [N, C, H, W].
        radius: One radius for the batch, or one per image (0 leaves an image as it is).

    Returns:
        uint8 [N, C, H, W], a new tensor.
    """
    n = images.shape[0]
    table = _weight_table(radius, n).to(device=images.device, dtype=torch.int32)
    if n == 0 or not bool(table[:, 0].any() | (table[:, 1] != 1 << 24).any()):
        return images.clone()
    chunk = max(1, _BLUR_CHUNK_VALUES // max(1, images[0].numel()))
    out = torch.empty_like(images)
    for i in range(0, n, chunk):
        out[i : i + chunk] = _blur_chunk(images[i : i + chunk], table[i : i + chunk])
    return out
