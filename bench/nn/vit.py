"""A small vision transformer ready for DP-SGD: torchvision's ViT made Opacus-compatible.

The network is ``torchvision.models.VisionTransformer`` (no pretrained weights, no
dropout) passed through ``opacus.validators.ModuleValidator.fix``, which swaps
``nn.MultiheadAttention`` for Opacus's ``DPMultiheadAttention``. It is wrapped in a
parameter-free module that takes uint8 images, so callers never normalise.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from bench.errors import BenchError
from bench.nn.images import to_input

MAX_SIDE = 512
"""Largest side of the ViT's square input (``task.model.image_size``)."""


class Uint8ViT(nn.Module):
    """A ViT that takes uint8 images [N, C, H, W] (C = 1 or 3) and returns logits [N, classes].

    Pixels are mapped to [-1, 1] by ``(x / 255 - 0.5) / 0.5``; greyscale images are
    repeated to three channels. The wrapper has no parameters of its own.

    Args:
        vit: The (Opacus-fixed) torchvision ``VisionTransformer``.
    """

    def __init__(self, vit: nn.Module):
        super().__init__()
        self.vit = vit

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Returns logits [N, classes] of uint8 images [N, C, H, W]."""
        if images.dtype != torch.uint8:
            raise TypeError(f"Uint8ViT takes uint8 images, got {images.dtype}")
        channels = images.shape[1]
        if channels not in (1, 3):
            raise BenchError(f"the ViT takes greyscale or RGB images, got {channels} channels")
        x = (images.float() / 255.0 - 0.5) / 0.5
        if channels == 1:
            x = x.expand(-1, 3, -1, -1)
        return self.vit(x)


def build_vit(image_size: int, patch_size: int, depth: int, width: int, heads: int, mlp_dim: int,
              classes: int) -> nn.Module:
    """Builds a randomly initialised ViT for DP-SGD that takes uint8 images.

    Initialisation draws from torch's global generator: seed it (or fork it) first.

    Args:
        image_size: Image side in pixels (square images).
        patch_size: Patch side in pixels; divides ``image_size``.
        depth: Number of encoder blocks.
        width: Hidden dimension; divisible by ``heads``.
        heads: Attention heads per block.
        mlp_dim: Hidden units of each block's MLP.
        classes: Number of output classes.

    Returns:
        A :class:`Uint8ViT` whose attention layers are Opacus's ``DPMultiheadAttention``.

    Raises:
        BenchError: A non-positive size, a patch size that does not divide the image
            size, or a width not divisible by the number of heads.
    """
    sizes = {"task.model.image_size": image_size, "task.model.patch_size": patch_size, "task.model.depth": depth,
             "task.model.width": width, "task.model.heads": heads, "task.model.mlp_dim": mlp_dim,
             "task.model.classes": classes}
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise BenchError(f"{name} must be a positive integer, got {value!r}")
    if image_size % patch_size:
        raise BenchError(f"task.model.patch_size={patch_size} must divide the image size {image_size}")
    if width % heads:
        raise BenchError(f"task.model.width={width} must be divisible by task.model.heads={heads}")
    from opacus.validators import ModuleValidator  # imported when a model is built: it costs a second at start-up
    from torchvision.models import VisionTransformer

    vit = VisionTransformer(image_size=image_size, patch_size=patch_size, num_layers=depth, num_heads=heads,
                            hidden_dim=width, mlp_dim=mlp_dim, dropout=0.0, attention_dropout=0.0,
                            num_classes=classes)
    return Uint8ViT(ModuleValidator.fix(vit))


def vit_inputs(images: Any, side: int, batch: int = 256) -> Any:
    """Returns uint8 images [N, C, side, side]: the stored images resized to the ViT's input.

    The resize is the one every task's network input goes through
    (:func:`bench.nn.images.to_input`: bilinear with antialiasing, non-square images
    stretched), rounded back to uint8, in chunks of ``batch`` to bound the float copy.
    Images already at ``side`` are returned as they are, so it is safe to apply twice.

    Args:
        images: uint8 images [N, C, H, W]: a tensor or disk-backed images that slice to tensors.
        side: The ViT's input side.
        batch: Images converted at once.
    """
    if tuple(images.shape[-2:]) == (side, side):
        return images
    out = torch.empty((len(images), int(images.shape[1]), side, side), dtype=torch.uint8)
    cpu = torch.device("cpu")
    for start in range(0, len(images), batch):
        x = to_input(torch.as_tensor(images[start:start + batch]), side, cpu)
        out[start:start + len(x)] = x.add_(1.0).mul_(127.5).round_().clamp_(0, 255).to(torch.uint8)
    return out
