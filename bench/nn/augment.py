"""Training-time augmentation of input batches: flips, padded random crops, random erasing."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def augment(
    x: torch.Tensor, generator: torch.Generator, pad: int = 0, erasing: float = 0.0, flip: bool = True
) -> torch.Tensor:
    """Augments a batch of network inputs, drawing every choice from ``generator``.

    Args:
        x: Inputs [N, C, H, W] (any device).
        generator: CPU generator of the random choices.
        pad: Zero-pad by this many pixels and crop back at a random offset (0: no shift).
        erasing: Probability of random erasing (Zhong et al. 2020): a rectangle of 2-40 %
            of the image with aspect ratio 0.3-3.3 is set to 0, the mean input value.
        flip: Random horizontal flips.

    Returns:
        The augmented batch (a new tensor).
    """
    n, _, h, w = x.shape
    if flip:
        flipped = (torch.rand(n, generator=generator) < 0.5).to(x.device)
        x = torch.where(flipped[:, None, None, None], x.flip(3), x)
    if pad > 0:
        padded = F.pad(x, (pad,) * 4)
        dx = torch.randint(0, 2 * pad + 1, (n,), generator=generator).to(x.device)
        dy = torch.randint(0, 2 * pad + 1, (n,), generator=generator).to(x.device)
        rows = dy[:, None] + torch.arange(h, device=x.device)[None]
        cols = dx[:, None] + torch.arange(w, device=x.device)[None]
        batch = torch.arange(n, device=x.device)[:, None, None]
        x = padded.permute(0, 2, 3, 1)[batch, rows[:, :, None], cols[:, None, :]].permute(0, 3, 1, 2)
    if erasing > 0:
        x = x * (1.0 - erasing_masks(n, h, w, erasing, generator).to(x.device, x.dtype)[:, None])
    return x.contiguous()


def erasing_masks(n: int, h: int, w: int, p: float, generator: torch.Generator) -> torch.Tensor:
    """Returns boolean masks [N, H, W] of the rectangles random erasing removes."""
    area = torch.empty(n).uniform_(0.02, 0.4, generator=generator) * h * w
    log_ratio = torch.empty(n).uniform_(math.log(0.3), math.log(1 / 0.3), generator=generator)
    eh = (area * log_ratio.exp()).sqrt().round().clamp(1, h).long()
    ew = (area / log_ratio.exp()).sqrt().round().clamp(1, w).long()
    top = (torch.rand(n, generator=generator) * (h - eh + 1)).long()
    left = (torch.rand(n, generator=generator) * (w - ew + 1)).long()
    active = torch.rand(n, generator=generator) < p
    r = torch.arange(h)[None, :, None]
    c = torch.arange(w)[None, None, :]
    rows = (r >= top[:, None, None]) & (r < (top + eh)[:, None, None])
    cols = (c >= left[:, None, None]) & (c < (left + ew)[:, None, None])
    return rows & cols & active[:, None, None]
