"""Per-image random streams.

A mechanism draws its randomness from a :class:`Streams` object that holds one seed per
image. Image ``i``'s draws depend only on its own seed, so a batch gives the same output
as its images one at a time: the property the conformance suite checks.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from bench.seeding import image_seeds

_LAPLACE_EDGE = 0.5 - 2.0**-54


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

    def _draw(self, shape: Sequence[int], dtype: torch.dtype, fill: Callable[[torch.Tensor, torch.Generator], None]) -> torch.Tensor:
        out = torch.empty((len(self), *shape), dtype=dtype, device=self.device)
        gen = torch.Generator(device=self.device)
        for i, seed in enumerate(self.seeds.tolist()):
            gen.manual_seed(seed)
            fill(out[i], gen)
        return out

    def uniform(self, shape: Sequence[int], dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Draws U[0, 1) values: a tensor [N, *shape]."""
        return self._draw(shape, dtype, lambda t, g: t.uniform_(0.0, 1.0, generator=g))

    def normal(self, shape: Sequence[int], dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Draws standard normal values: a tensor [N, *shape]."""
        return self._draw(shape, dtype, lambda t, g: t.normal_(0.0, 1.0, generator=g))

    def laplace(self, shape: Sequence[int], dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Draws Laplace(0, 1) values by inverting the CDF of a float64 uniform: [N, *shape]."""
        u = self.uniform(shape, torch.float64) - 0.5
        u = u.clamp_(-_LAPLACE_EDGE, _LAPLACE_EDGE)
        return (-torch.sign(u) * torch.log1p(-2.0 * u.abs())).to(dtype)

    def integers(self, high: int, shape: Sequence[int]) -> torch.Tensor:
        """Draws integers uniform in [0, high): an int64 tensor [N, *shape]."""
        return self._draw(shape, torch.int64, lambda t, g: t.random_(0, high, generator=g))
