"""Pixelation (mosaicing): every b x b cell is filled with its mean colour."""

from __future__ import annotations

import torch

from bench.core.interfaces import Mechanism, Param, ParamSpace, Streams
from bench.core.registry import register_mechanism
from mechanisms._ops import MAX_BLOCK, pixelate


@register_mechanism("pixelate")
class Pixelate(Mechanism):
    """Averages every b x b cell and fills the cell with its mean.

    The image keeps its size; a ragged edge cell averages the pixels it has; means are
    rounded half up to the nearest integer (few-shot paper, Sec. II-B a).
    """

    description = "Mosaic: each b x b cell filled with its mean colour."
    params = ParamSpace(
        block=Param(int, 4, low=1, high=MAX_BLOCK, tune=(2, 16), help="cell side b", unit="px"),
    )

    def apply(
        self, images: torch.Tensor, *, generator: Streams, boxes: list[torch.Tensor] | None = None
    ) -> torch.Tensor:
        """Returns the pixelated batch."""
        self.check_inputs(images, generator)
        return pixelate(images, self.config["block"])
