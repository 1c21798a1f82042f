"""Auditor of latent neighbourhoods: two latent vectors at the clip bounds.

A ``"latent (clipped)"`` claim covers the clipped latent vector (DP in a generator's
latent space, latent-space paper, Sec. 3): any two images map, after clipping, to two
vectors inside the per-component bounds, so the farthest neighbours are the vectors of
all lower and all upper bounds. The auditor fits the mechanism (its generator and clip
bounds) on random public images, then releases those two vectors through the
mechanism's ``privatise(latents, generator)``: the image is post-processing of its
output, so the claim stands or falls there.
"""

from __future__ import annotations

import torch

from bench.audit.config import AuditConfig
from bench.audit.units import Auditor, register_auditor
from bench.errors import BenchError
from bench.interfaces import Mechanism, PrivacyClaim
from bench.streams import Streams


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
