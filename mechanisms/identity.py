"""The identity mechanism: the clean reference every frontier is measured against."""

from __future__ import annotations

import torch

from bench.core.interfaces import Mechanism, ParamSpace, Streams
from bench.core.registry import register_mechanism


@register_mechanism("identity")
class Identity(Mechanism):
    """Releases the images unchanged (as a copy)."""

    description = "No change: the clean reference."
    params = ParamSpace()

    def apply(
        self, images: torch.Tensor, *, generator: Streams, boxes: list[torch.Tensor] | None = None
    ) -> torch.Tensor:
        """Returns a copy of the batch."""
        self.check_inputs(images, generator)
        return images.clone()
