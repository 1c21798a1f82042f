"""Auditor of latent neighbourhoods: two latent vectors at the clip bounds.

A ``"latent (clipped)"`` claim covers the clipped latent vector (DP in a generator's
latent space, latent-space paper, Sec. 3): any two images map, after clipping, to two
vectors inside the per-component bounds, so the farthest neighbours are the vectors of
all lower and all upper bounds. The auditor fits the mechanism (its generator and clip
bounds) on random public images, then releases those two vectors through the
mechanism's ``privatise(latents, generator)``: the image is post-processing of its
output, so the claim stands or falls there, if ``apply`` really releases only the decoded
noisy latent. To see a mechanism whose ``apply`` leaks anything else, two more candidate
pairs release images through ``apply`` and observe every value of the decoded image: an
all-0 vs an all-255 image, and two random images (any two images are neighbours under the
claim, since both clipped latents lie within the bounds).
"""

from __future__ import annotations

import math

import torch

from bench.audit.config import AuditConfig
from bench.audit.units import Auditor, register_auditor, whole_image_boxes
from bench.core.interfaces import Mechanism, PrivacyClaim
from bench.errors import BenchError
from bench.randomness.seeding import make_generator
from bench.randomness.streams import Streams
from bench.release import guard as mechanism_guard

_IMAGE_PAIRS = ("an all-0 vs an all-255 image through apply", "two random images through apply")


@register_auditor("latent (clipped)")
class ClippedLatentAuditor(Auditor):
    """The all-lower and all-upper clipped latent vectors (unit ``"latent (clipped)"``).

    The mechanism must provide ``privatise(latents [N, d], generator) -> [N, d]`` and,
    once fitted, the clip bounds ``lower`` and ``upper`` (tensors [d]).
    """

    def __init__(self, mechanism: Mechanism, claim: PrivacyClaim, config: AuditConfig):
        super().__init__(mechanism, claim, config)
        if not callable(getattr(mechanism, "privatise", None)):
            raise BenchError(
                f"mechanism {mechanism.name!r} claims unit {claim.unit!r} but has no "
                "privatise(latents, generator) method to audit"
            )
        self.pair: tuple[torch.Tensor, torch.Tensor] | None = None

    def prepare(self) -> None:
        """Fits the mechanism, then takes its clip bounds as the two inputs.

        Raises:
            BenchError: The fitted mechanism has no usable ``lower``/``upper`` bounds.
        """
        super().prepare()
        lower, upper = getattr(self.mechanism, "lower", None), getattr(self.mechanism, "upper", None)
        if not (isinstance(lower, torch.Tensor) and isinstance(upper, torch.Tensor)
                and lower.dim() == 1 and lower.shape == upper.shape):
            raise BenchError(
                f"mechanism {self.mechanism.name!r}: after fit, lower and upper must be the clip bounds "
                "(tensors [d]) of its latent components"
            )
        self.pair = (lower.to(self.device), upper.to(self.device))
        shape = self.public_shape()
        generator = make_generator(self.config.seed, "audit", "pairs", "latent images")
        one, two = torch.randint(0, 256, (2, *shape), generator=generator, dtype=torch.uint8)
        self.images = [(torch.zeros(shape, dtype=torch.uint8), torch.full(shape, 255, dtype=torch.uint8)), (one, two)]

    def candidate_count(self) -> int:
        """Returns 3: the clip-bound latents, and two image pairs released through ``apply``."""
        return 1 + len(_IMAGE_PAIRS)

    def describe_candidate(self, index: int) -> str:
        """Returns candidate ``index`` in words."""
        if index == 0:
            return self.describe()
        c, h, w = self.public_shape()
        return f"{h}x{w}x{c} images: {_IMAGE_PAIRS[index - 1]} (the whole decoded image)"

    def candidate_values(self, index: int) -> int:
        """Returns d for the latents, C H W for an image pair."""
        return self.values_per_trial() if index == 0 else math.prod(self.public_shape())

    def observe_candidate(self, index: int, which: int, streams: Streams) -> torch.Tensor:
        """Returns the privatised latents (candidate 0) or every value of the released image: [n, k]."""
        if index == 0:
            return self.observe(which, streams)
        image = self.images[index - 1][which].to(self.device)
        batch = image.expand(len(streams), -1, -1, -1).contiguous()
        _, _, height, width = batch.shape
        boxes = whole_image_boxes(len(batch), height, width) if self.mechanism.uses_boxes else None
        released = mechanism_guard.apply(self.mechanism, batch, generator=streams, boxes=boxes)
        return released.flatten(1).to(torch.float32)

    def describe(self) -> str:
        """Returns the pair in words."""
        dims = "d" if self.pair is None else str(self.pair[0].numel())
        return f"latent vectors ({dims} components) at the lower vs the upper clip bounds"

    def values_per_trial(self) -> int:
        """Returns d (the latent dimension), or 1 before :meth:`prepare`."""
        return 1 if self.pair is None else int(self.pair[0].numel())

    def observe(self, which: int, streams: Streams) -> torch.Tensor:
        """Returns the privatised latent vectors: [n, d]."""
        assert self.pair is not None, "prepare() first"
        latents = self.pair[which].expand(len(streams), -1).contiguous()
        return self.mechanism.privatise(latents, streams.to(self.device))  # type: ignore[attr-defined]
