"""Derived seeds: every random draw comes from a generator keyed by (seed, purpose)."""

from __future__ import annotations

import hashlib

import torch

_MASK63 = (1 << 63) - 1


def derive_seed(seed: int, *purpose: object) -> int:
    """Returns a 63-bit seed derived from a base seed and a purpose path.

    Args:
        seed: The run's base seed.
        *purpose: Labels that name what the seed is for, e.g. ``("release", "test")``.

    Returns:
        A non-negative integer that differs for every (seed, purpose) pair.
    """
    text = "\x1f".join([str(int(seed))] + [str(p) for p in purpose])
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & _MASK63


def make_generator(seed: int, *purpose: object, device: str | torch.device = "cpu") -> torch.Generator:
    """Returns a torch generator seeded from ``derive_seed(seed, *purpose)``.

    Args:
        seed: The run's base seed.
        *purpose: Labels that name what the generator is for.
        device: Device the generator draws on.
    """
    g = torch.Generator(device=device)
    g.manual_seed(derive_seed(seed, *purpose))
    return g


def image_seeds(seed: int, purpose: str, count: int, start: int = 0) -> torch.Tensor:
    """Returns one seed per image for images ``start .. start+count-1`` of a split.

    The seed of an image depends only on (seed, purpose, index), never on how the
    images are batched.

    Args:
        seed: The run's base seed.
        purpose: What the images are, e.g. ``"release/test"``.
        count: Number of images.
        start: Index of the first image.

    Returns:
        int64 tensor of shape [count].
    """
    base = derive_seed(seed, purpose)
    idx = torch.arange(start, start + count, dtype=torch.int64)
    return _mix64(idx + base) & _MASK63


def _mix64(x: torch.Tensor) -> torch.Tensor:
    """splitmix64 finaliser on int64 tensors (wrapping arithmetic, logical shifts)."""
    x = x * -7046029254386353131  # 0x9E3779B97F4A7C15 as signed int64
    x = x ^ _lshr(x, 30)
    x = x * -4658895280553007687  # 0xBF58476D1CE4E5B9
    x = x ^ _lshr(x, 27)
    x = x * -7723592293110705685  # 0x94D049BB133111EB
    return x ^ _lshr(x, 31)


def _lshr(x: torch.Tensor, n: int) -> torch.Tensor:
    return (x >> n) & ((1 << (64 - n)) - 1)
