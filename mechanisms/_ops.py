"""Batched tensor operations shared by the mechanisms.

All functions take uint8 batches [N, C, H, W] and work on the batch's device, with no
Python loop over images or cells: loops here run over the b rows of a cell or over
chunks of a large batch (:func:`chunks`). The blur is in :mod:`mechanisms._blur`.
"""

from __future__ import annotations

import math

import torch

from bench.randomness.streams import Streams
from bench.system.kernels import DEVICE_BATCH_VALUES

MAX_BLOCK = 4096
"""Largest cell side a pixelating mechanism accepts (larger than any image it is meant for)."""
_WORDS = {2: torch.int16, 4: torch.int32, 8: torch.int64}
_BYTE_REPEAT = {2: 0x0101, 4: 0x01010101, 8: 0x0101010101010101}
_EVEN_BYTES = 0x00FF00FF
_PACKED_MAX_BLOCK = 64
CHUNK_VALUES = 1 << 20
"""Input values per chunk of a batch on the CPU. A chunk's intermediates stay below glibc's
largest mmap threshold, so the allocator hands the same memory back chunk after chunk instead
of fresh pages (whose faults made the cost per value grow with the batch), and mostly in cache."""


def chunk_values(device: torch.device | str) -> int:
    """Returns the input values per chunk on ``device``: :data:`CHUNK_VALUES` on the CPU, else a release's batch there
    (:data:`bench.system.kernels.DEVICE_BATCH_VALUES`)."""
    return CHUNK_VALUES if torch.device(device).type == "cpu" else DEVICE_BATCH_VALUES


def chunks(images: torch.Tensor, values: int | None = None) -> list[slice]:
    """Returns slices of the batch's first axis holding about ``values`` values each (default: :func:`chunk_values`)."""
    n = images.shape[0]
    step = max(1, (values or chunk_values(images.device)) // max(1, images[0].numel())) if n else 1
    return [slice(i, min(i + step, n)) for i in range(0, n, step)]


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


def fill_cells(cells: torch.Tensor, block: int, height: int, width: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """Expands one value per cell into an image of the cells' pixels.

    Args:
        cells: Tensor [N, C, ceil(H/b), ceil(W/b)].
        block: Cell side b.
        height: Output height H.
        width: Output width W.
        out: Contiguous tensor [N, C, H, W] of the cells' dtype to write into (None: a new one).

    Returns:
        ``out``, or a new contiguous tensor [N, C, H, W] of the cells' dtype.
    """
    n, c, rows_n, cols_n = cells.shape
    rows = _fill_row(cells, block, width)
    if out is None:
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
    out = torch.empty_like(images, memory_format=torch.contiguous_format)
    for part in chunks(images):
        fill_cells(rounded_cell_means(images[part], block).to(torch.uint8), block, height, width, out[part])
    return out


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
    return cast_uint8(values.add_(0.5).clamp_(0.0, 255.0))


def cast_uint8(values: torch.Tensor) -> torch.Tensor:
    """Casts float values already in [0, 255] to uint8 (truncating), through int32.

    Both casts give the same bytes on [0, 255]; torch's direct float-to-uint8 cast is
    scalar on the CPU (about 1.6 ns a value on AVX2, against 0.25 ns through int32).
    """
    return values.to(torch.int32).to(torch.uint8)


def draws_by_default(generator: Streams, method: str) -> bool:
    """True when ``generator``'s ``method`` is Streams' own, so a fused kernel may draw in its place.

    A fused kernel draws exactly what the method would (:mod:`bench.randomness.rng`); a Streams
    subclass that overrides the method is honoured by calling it instead.
    """
    return getattr(type(generator), method) is getattr(Streams, method)
