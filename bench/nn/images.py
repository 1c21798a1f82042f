"""Turning uint8 image tensors into network inputs."""

from __future__ import annotations

import torch
import torch.nn.functional as F


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


@torch.no_grad()
def embed(model: torch.nn.Module, inputs: torch.Tensor, batch: int = 512) -> torch.Tensor:
    """Runs a model in eval mode over prepared inputs, in batches; returns [N, D]."""
    was_training = model.training
    model.eval()
    out = torch.cat([model(inputs[i : i + batch]) for i in range(0, len(inputs), batch)])
    model.train(was_training)
    return out
