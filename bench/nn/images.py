"""Turning uint8 image tensors into network inputs."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch
import torch.nn.functional as F
import torch.utils.data

from bench.system import precision
from bench.system.cpus import usable_cpus


def as_rgb(x: torch.Tensor) -> torch.Tensor:
    """Repeats a grey batch [N, 1, H, W] to three channels for a network that takes RGB (others as given)."""
    return x.expand(-1, 3, -1, -1) if x.shape[1] == 1 else x


def to_input(images: torch.Tensor, size: int | tuple[int, int] | None, device: torch.device) -> torch.Tensor:
    """Converts uint8 [N, C, H, W] into float inputs in [-1, 1], resized with antialiasing.

    Args:
        images: uint8 images (any device).
        size: Output side (square) or (h, w); None keeps the size.
        device: Where the result lives.
    """
    x = images.to(device=device, dtype=torch.float32).div_(127.5).sub_(1.0)
    if size is not None:
        hw = (size, size) if isinstance(size, int) else tuple(size)
        if tuple(x.shape[-2:]) != hw:
            x = F.interpolate(x, size=hw, mode="bilinear", antialias=True, align_corners=False)
    return x


def prepare(images: torch.Tensor, size: int | tuple[int, int] | None, device: torch.device, batch: int = 2048) -> torch.Tensor:
    """Like :func:`to_input` over a whole split, in chunks to bound peak memory."""
    return torch.cat([to_input(images[i : i + batch], size, device) for i in range(0, len(images), batch)])


def image_batches(images: Any, batch: int, device: torch.device | str, workers: int | None = None) -> Iterator[torch.Tensor]:
    """Streams uint8 images to ``device`` in order, ``batch`` at a time.

    In-memory tensors are sliced. Images kept on disk (:class:`~bench.data.shards.ShardedImages`)
    go through a ``DataLoader`` whose worker processes read the next batches while this one
    is used (pinned memory and non-blocking copies on CUDA), so a split of any size costs
    a few batches of memory.

    Args:
        images: uint8 images [N, C, H, W]: a tensor or ``ShardedImages``.
        batch: Images per batch.
        device: Where the batches go.
        workers: Reader processes for images on disk (default: up to 2, fewer on fewer cores).
    """
    device = torch.device(device)
    if isinstance(images, torch.Tensor):
        for start in range(0, len(images), batch):
            yield images[start : start + batch].to(device)
        return
    from torch.utils.data import DataLoader

    workers = min(2, max(0, usable_cpus() - 1)) if workers is None else workers
    loader = DataLoader(_Ranges(images, batch), batch_size=None, num_workers=workers,
                        pin_memory=device.type == "cuda", prefetch_factor=2 if workers else None,
                        worker_init_fn=_fixed_mmap_threshold if workers else None)
    for chunk in loader:
        yield chunk.to(device, non_blocking=True)


def _fixed_mmap_threshold(_: int) -> None:
    """Makes a reader process return every batch buffer to the system when it is freed.

    glibc raises its mmap threshold after freeing a large block, so later batch-sized
    buffers come from the heap and stay there: a reader process would grow by a batch
    for every batch it reads. A fixed threshold (1 MiB) keeps them mmap-backed.
    """
    import ctypes
    import ctypes.util

    with contextlib.suppress(OSError, AttributeError, TypeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD


class _Ranges(torch.utils.data.Dataset):
    """Batch ``i`` of a disk-backed image array (the DataLoader's unit of work)."""

    def __init__(self, images: Any, batch: int):
        self.images, self.batch = images, batch

    def __len__(self) -> int:
        return (len(self.images) + self.batch - 1) // self.batch

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.images[i * self.batch : (i + 1) * self.batch]


@torch.no_grad()
def embed_images(model: torch.nn.Module, images: Any, size: int | tuple[int, int] | None, device: torch.device,
                 batch: int = 512) -> torch.Tensor:
    """Runs a model in eval mode over uint8 images streamed in batches; returns [N, D] on ``device``.

    The same numbers as ``embed(model, prepare(images, size, device), batch)``: inputs are
    converted image by image and the model sees the same batches.
    """
    was_training = model.training
    model.eval()
    out = []
    with precision.autocast(device):
        for chunk in image_batches(images, batch, device):
            x = to_input(chunk, size, device)
            precision.verify(model, x)
            out.append(model(x).float())
    out = torch.cat(out)
    model.train(was_training)
    return out


@torch.no_grad()
def embed(model: torch.nn.Module, inputs: torch.Tensor, batch: int = 512) -> torch.Tensor:
    """Runs a model in eval mode over prepared inputs, in batches; returns [N, D]."""
    was_training = model.training
    model.eval()
    precision.verify(model, inputs[:batch])
    with precision.autocast(inputs.device):
        out = torch.cat([model(inputs[i : i + batch]).float() for i in range(0, len(inputs), batch)])
    model.train(was_training)
    return out
