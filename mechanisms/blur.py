"""Gaussian blur with the semantics of Pillow's ``ImageFilter.GaussianBlur``."""

from __future__ import annotations

import torch

from bench.core.interfaces import Mechanism, Param, ParamSpace, Streams
from bench.core.registry import register_mechanism
from mechanisms._blur import gaussian_blur

MAX_RADIUS = 2e9
"""Pillow refuses radii from 2^31 on (its box radius is a C int); from the image's side on, any radius blurs
the same way and as fast (each line's window holds the whole line)."""


@register_mechanism("blur")
class Blur(Mechanism):
    """Blurs every channel like ``PIL.ImageFilter.GaussianBlur(radius=r)``.

    The few-shot paper (Sec. II-B b) blurs with Pillow, which approximates a Gaussian of
    standard deviation r by three extended box filters per axis, rounding to 8 bits
    after each; this reproduces that integer arithmetic on whole batches, bit for bit.
    """

    description = "Gaussian blur, Pillow GaussianBlur(radius) semantics."
    params = ParamSpace(
        radius=Param(float, 2.0, low=0.0, high=MAX_RADIUS, tune=(0.5, 10.0),
                     help="PIL GaussianBlur radius (standard deviation)", unit="px"),
    )

    def apply(
        self, images: torch.Tensor, *, generator: Streams, boxes: list[torch.Tensor] | None = None
    ) -> torch.Tensor:
        """Returns the blurred batch."""
        self.check_inputs(images, generator)
        return gaussian_blur(images, self.config["radius"])
