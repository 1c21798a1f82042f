"""Per-image random streams.

A mechanism draws its randomness from a :class:`Streams` object that holds one seed per
image. Image ``i``'s draws are counter-based (:mod:`bench.randomness.rng`): value ``k`` of a draw is a
fixed function of image ``i``'s seed and ``k``, so a batch gives the same output as its
images one at a time (the property the conformance suite checks), draws for a whole batch
are one vectorised kernel (:mod:`bench.system.kernels`), and the integers behind the values are
the same on every device.

Draws are stateless: two draws of the same shape from the same streams return the same
values. A mechanism that needs several independent draws takes them from
:meth:`Streams.derive`.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from bench.randomness import rng
from bench.randomness.seeding import derive_seed, image_seeds
from bench.system.kernels import Kernel, deciding, kernel

_MASK63 = (1 << 63) - 1


@kernel
def _uniform24(seeds: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
    return rng.uniform(rng.words(seeds, counters), torch.float32)


@kernel
def _uniform53(seeds: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
    return rng.uniform(rng.words(seeds, counters), torch.float64)


@kernel
def _normal(seeds: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
    return rng.normals(seeds, counters.shape[0])


@kernel
def _laplace(seeds: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
    return rng.laplace(rng.words(seeds, counters))


@kernel
def _integers(seeds: torch.Tensor, counters: torch.Tensor, high: int) -> torch.Tensor:
    return rng.integers(rng.words(seeds, counters), high)


class Streams:
    """Independent random streams, one per image of a batch.

    Args:
        seeds: int64 tensor [N], one seed per image.
        device: Device the draws are made on.
    """

    def __init__(self, seeds: torch.Tensor, device: str | torch.device = "cpu"):
        self.seeds = torch.as_tensor(seeds, dtype=torch.int64).reshape(-1).cpu()
        self.device = torch.device(device)

    @classmethod
    def for_images(
        cls, seed: int, purpose: str, count: int, *, start: int = 0, device: str | torch.device = "cpu"
    ) -> "Streams":
        """Returns the streams of images ``start .. start+count-1`` for a purpose.

        Args:
            seed: The run's base seed.
            purpose: What the images are, e.g. ``"release/test"``.
            count: Number of images.
            start: Index of the first image in its split.
            device: Device the draws are made on.
        """
        return cls(image_seeds(seed, purpose, count, start), device)

    def __len__(self) -> int:
        return int(self.seeds.numel())

    def __getitem__(self, index: int | slice | Sequence[int] | torch.Tensor) -> "Streams":
        if isinstance(index, int):
            index = slice(index, index + 1)
        return Streams(self.seeds[index], self.device)

    def to(self, device: str | torch.device) -> "Streams":
        """Returns the same streams drawing on another device."""
        return Streams(self.seeds, device)

    def seeds_on(self, device: str | torch.device) -> torch.Tensor:
        """Returns the seeds as a fresh int64 tensor [N] on ``device``, for a fused kernel to draw from.

        To a CUDA device they go from pinned memory without blocking the host (a copy from
        pageable memory would wait for all the work queued before it).
        """
        if torch.device(device).type == "cuda" and self.seeds.device.type == "cpu":
            return self.seeds.pin_memory().to(device, non_blocking=True)
        return self.seeds.to(device, copy=True)

    def derive(self, purpose: str) -> "Streams":
        """Returns independent streams for another draw of the same images.

        Args:
            purpose: Names the draw, e.g. ``"mask"``; equal purposes give equal streams.
        """
        return Streams(rng.mix64(self.seeds ^ derive_seed(0, "streams", purpose)) & _MASK63, self.device)

    def _draw(self, fn: Kernel, shape: Sequence[int], *extra: int) -> torch.Tensor:
        shape = tuple(int(d) for d in shape)
        count = math.prod(shape)
        run = fn.eager if len(self) == 0 or count == 0 else fn
        with deciding(self.device, len(self) * count):
            flat = run(self.seeds_on(self.device), rng.counters((count,), self.device), *extra)
        return flat.view(len(self), *shape)

    def uniform(self, shape: Sequence[int], dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Draws U[0, 1) values: a tensor [N, *shape] (24-bit, or 53-bit for float64)."""
        if dtype == torch.float64:
            return self._draw(_uniform53, shape)
        return self._draw(_uniform24, shape).to(dtype)

    def normal(self, shape: Sequence[int], dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Draws standard normal values by Box-Muller, two a word (:func:`bench.randomness.rng.normals`): [N, *shape]."""
        return self._draw(_normal, shape).to(dtype)

    def laplace(self, shape: Sequence[int], dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Draws Laplace(0, 1) values from a sign bit and a 53-bit exponential: [N, *shape]."""
        return self._draw(_laplace, shape).to(dtype)

    def integers(self, high: int, shape: Sequence[int]) -> torch.Tensor:
        """Draws integers uniform in [0, high): an int64 tensor [N, *shape]."""
        return self._draw(_integers, shape, int(high))
