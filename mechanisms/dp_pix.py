"""DP-Pix (Fan 2018): pixelation followed by Laplace noise on every cell mean."""

from __future__ import annotations

import torch

from bench.core.interfaces import Mechanism, Param, ParamSpace, PrivacyClaim, Streams
from bench.core.registry import register_mechanism
from bench.randomness import rng
from bench.system.kernels import deciding, kernel
from mechanisms._dp import dp_pix_scale
from mechanisms._ops import (
    MAX_BLOCK,
    cast_uint8,
    cell_counts,
    cell_means,
    chunks,
    draws_by_default,
    fill_cells,
    to_uint8,
)


@kernel
def _noisy_cells(means: torch.Tensor, scale: torch.Tensor, seeds: torch.Tensor) -> torch.Tensor:
    """One pass over means [N, C, Hc, Wc]: ``Streams.laplace`` draws, scaled per cell, added, rounded, clipped."""
    noise = rng.laplace(rng.words(seeds, rng.counters(means.shape[1:], means.device))).to(torch.float32)
    return cast_uint8(noise.mul_(scale).add_(means).add_(0.5).clamp_(0.0, 255.0))


@register_mechanism("dp_pix")
class DPPix(Mechanism):
    """Differentially private pixelation, epsilon-DP for images differing in m pixels.

    Every b x b cell mean of every channel gets Laplace noise of scale
    ``255 m C / (b^2 epsilon)`` (few-shot paper, Eq. 5, with the channel factor C of
    :func:`mechanisms._dp.dp_pix_sensitivity`), then values are clipped to [0, 255] and
    rounded. A ragged edge cell with k < b^2 pixels gets the scale ``255 m C / (k
    epsilon)``, since one pixel moves its mean by 255 / k: the guarantee then holds for
    any image size.
    """

    description = "Pixelate, then Laplace noise on every cell mean (epsilon-DP, m-pixel neighbours)."
    params = ParamSpace(
        epsilon=Param(float, 3.0, low=0.0, low_open=True, log=True, tune=(0.1, 100.0), help="privacy budget"),
        block=Param(int, 4, low=1, high=MAX_BLOCK, tune=(2, 16), help="cell side b", unit="px"),
        m=Param(int, 1, low=1, tune=(1, 1), help="neighbouring images differ in at most m pixels"),
    )

    def noise_scale(self, channels: int) -> float:
        """Returns the Laplace scale of a full cell for images of ``channels`` channels."""
        return dp_pix_scale(self.config["epsilon"], self.config["block"], self.config["m"], channels)

    def apply(
        self, images: torch.Tensor, *, generator: Streams, boxes: list[torch.Tensor] | None = None
    ) -> torch.Tensor:
        """Returns the DP-pixelated batch."""
        self.check_inputs(images, generator)
        block = self.config["block"]
        _, channels, height, width = images.shape
        scale = (self.noise_scale(channels) * block * block) / cell_counts(height, width, block, images.device)
        out = torch.empty_like(images, memory_format=torch.contiguous_format)
        if not (len(images) and draws_by_default(generator, "laplace")):
            means, _ = cell_means(images, block)
            cells = to_uint8(means.addcmul_(generator.laplace(means.shape[1:]).to(images.device), scale))
            return fill_cells(cells, block, height, width, out)
        seeds = generator.seeds_on(images.device)
        with deciding(images.device, images.numel()):
            for part in chunks(images):
                means, _ = cell_means(images[part], block)
                fill_cells(_noisy_cells(means, scale, seeds[part]), block, height, width, out[part])
        return out

    def claim(self) -> PrivacyClaim:
        """Returns epsilon-DP for images that differ in at most m pixels."""
        m = self.config["m"]
        return PrivacyClaim(
            self.config["epsilon"],
            0.0,
            unit=f"m-pixel (m={m})",
            note="neighbouring images differ in at most m pixels (all channels of each)",
        )
