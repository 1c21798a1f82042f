"""Conv-4: the four-block embedding network of prototypical networks (Snell et al. 2017)."""

from __future__ import annotations

import torch
from torch import nn


def conv_block(cin: int, cout: int) -> nn.Sequential:
    """Returns conv3x3 -> batch norm -> ReLU -> 2x2 max-pool.

    The pool runs before the ReLU: the two commute exactly (max of ReLUs = ReLU of the
    max, and gradients reach the same elements), and the ReLU then touches a quarter of
    the values, forward and backward. Parameter names are those of the conv-BN-ReLU-pool order.
    """
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.MaxPool2d(2),
        nn.ReLU(inplace=True),
    )


class Conv4(nn.Module):
    """Four conv blocks of 64 filters; the flattened feature map is the embedding.

    Args:
        in_channels: Image channels.
        width: Filters per block (64 in the paper).
    """

    def __init__(self, in_channels: int = 3, width: int = 64):
        super().__init__()
        self.blocks = nn.Sequential(*(conv_block(in_channels if i == 0 else width, width) for i in range(4)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Embeds float images [N, C, H, W] into [N, D]."""
        return self.blocks(x).flatten(1)
