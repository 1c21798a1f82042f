"""epsilon-image DP (cross-camera reID paper): pixelation, colour quantisation, Laplace noise."""

from __future__ import annotations

import torch

from bench.core.interfaces import Mechanism, Param, ParamSpace, PrivacyClaim, Streams
from bench.core.registry import register_mechanism
from mechanisms._dp import image_dp_epsilon_factor, image_dp_levels, image_dp_scale
from mechanisms._ops import MAX_BLOCK, chunks, draws_by_default, fill_cells, rounded_cell_means


@register_mechanism("image_dp")
class ImageDP(Mechanism):
    """epsilon-DP between any two images of the same size (cross-camera reID paper, Eqs. 1-3).

    f(x) is the pixelated (cell side b), colour-quantised image: every channel of every
    cell mean v becomes the level ``floor(v / c)`` in ``0 .. L-1`` with ``L = 256 / c``
    (the paper's c are powers of two; for other c the last bin is partial).
    Laplace noise of scale ``Delta_f / epsilon`` with ``Delta_f = (w h / b^2) (L - 1)^3``
    (Eq. 3) is added to every level; the result is rounded to a level and clipped to
    ``[0, L-1]``. Mapping back puts every level at the centre of its bin, ``level c +
    floor(c / 2)`` (c = 1 gives the values themselves), and fills the cell. With
    ``epsilon=none`` only pixelation and quantisation are applied.
    """

    description = "Pixelate (b), quantise to 256/c levels, Laplace noise on the levels (epsilon-DP for any same-size images)."
    params = ParamSpace(
        epsilon=Param(
            float, 1e6, low=0.0, low_open=True, log=True, nullable=True, tune=(1e-3, 1e7),
            help="privacy budget; none = no noise",
        ),
        block=Param(int, 2, low=1, high=MAX_BLOCK, tune=(1, 8), help="pixelation cell side b", unit="px"),
        colours=Param(int, 32, low=1, high=256, log=True, tune=(1, 128), help="quantisation step c: 256/c levels kept"),
    )

    def __init__(self, **params):
        super().__init__(**params)
        self.levels = image_dp_levels(self.config["colours"])

    def noise_scale(self, height: int, width: int) -> float:
        """Returns the Laplace scale in levels for images of this size (0 without noise)."""
        if self.config["epsilon"] is None:
            return 0.0
        return image_dp_scale(self.config["epsilon"], width, height, self.config["block"], self.config["colours"])

    def apply(
        self, images: torch.Tensor, *, generator: Streams, boxes: list[torch.Tensor] | None = None
    ) -> torch.Tensor:
        """Returns the obfuscated batch."""
        self.check_inputs(images, generator)
        block, colours = self.config["block"], self.config["colours"]
        height, width = images.shape[-2:]
        out = torch.empty_like(images, memory_format=torch.contiguous_format)
        # Streams' own draws are per image, so a chunk draws from its images' streams;
        # a generator that overrides them draws for the whole batch at once.
        parts = chunks(images) if draws_by_default(generator, "laplace") else [slice(None)]
        for part in parts:
            levels = torch.div(rounded_cell_means(images[part], block), colours, rounding_mode="floor")
            if self.config["epsilon"] is not None:
                draws = generator[part] if len(parts) > 1 else generator
                noise = draws.laplace(levels.shape[1:]).to(images.device)
                noisy = noise.mul_(self.noise_scale(height, width)).add_(levels)
                levels = noisy.add_(0.5).floor_().clamp_(0, self.levels - 1)
            values = levels.to(torch.int32) * colours + colours // 2
            fill_cells(values.clamp_(max=255).to(torch.uint8), block, height, width, out[part])
        return out

    def claim(self) -> PrivacyClaim | None:
        """Returns epsilon-DP between any two images of the same size, or None without noise."""
        epsilon = self.config["epsilon"]
        if epsilon is None:
            return None
        factor = image_dp_epsilon_factor(self.config["colours"], channels=3)
        note = "Eq. 3 sensitivity; noise on the quantised levels of the pixelated image"
        if factor > 1:
            note += (
                f"; with {self.levels} levels Eq. 3 is below the L1 sensitivity of an RGB cell, "
                f"so the guarantee holds at {factor:g} x epsilon"
            )
        return PrivacyClaim(epsilon * factor, 0.0, unit="any image of this size", note=note)
