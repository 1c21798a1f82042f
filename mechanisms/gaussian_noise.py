"""Independent Gaussian noise on every value (few-shot paper, Sec. III-A)."""

from __future__ import annotations

import torch

from bench.core.interfaces import Mechanism, Param, ParamSpace, Streams
from bench.core.registry import register_mechanism
from bench.randomness import rng
from bench.system.kernels import deciding, kernel
from mechanisms._ops import cast_uint8, chunks, draws_by_default, to_uint8


@kernel
def _add_noise(images: torch.Tensor, seeds: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """One pass over images [N, C, H, W]: ``Streams.normal`` draws, scaled, added, rounded half up, clipped."""
    noise = rng.normals(seeds, images[0].numel()).view(images.shape)
    return cast_uint8(noise.mul_(sigma).add_(images).add_(0.5).clamp_(0.0, 255.0))


@register_mechanism("gaussian_noise")
class GaussianNoise(Mechanism):
    """Adds N(0, sigma^2) to every value on the 0-255 scale, then clips and rounds.

    For an H x W x C image, H W C values are drawn (few-shot paper, Sec. III-A); the
    paper's grid is sigma in {40, 80, 120, 160, 200}. No formal guarantee.
    """

    description = "Add N(0, sigma^2) to every value (0-255 scale), clip, round."
    params = ParamSpace(
        sigma=Param(float, 40.0, low=0.0, tune=(10.0, 200.0), help="noise standard deviation on the 0-255 scale"),
    )

    def apply(
        self, images: torch.Tensor, *, generator: Streams, boxes: list[torch.Tensor] | None = None
    ) -> torch.Tensor:
        """Returns the noisy batch."""
        self.check_inputs(images, generator)
        if len(images) and draws_by_default(generator, "normal"):
            sigma = torch.full((), self.config["sigma"], dtype=torch.float32, device=images.device)  # no copy from the host
            seeds = generator.seeds_on(images.device)
            out = torch.empty_like(images, memory_format=torch.contiguous_format)
            with deciding(images.device, images.numel()):
                for part in chunks(images):
                    out[part] = _add_noise(images[part], seeds[part], sigma)
            return out
        noise = generator.normal(images.shape[1:]).to(images.device)
        return to_uint8(torch.add(images, noise, alpha=self.config["sigma"], out=noise))
