"""Random streams from the operating system's CSPRNG, for releasing images for real use.

The benchmark's :class:`bench.randomness.streams.Streams` are counter-based: value ``k`` of an image
is a fixed function of (seed, split, index, k), and the seed is written into every
result. Anyone who knows it can subtract the noise. :class:`SecureStreams` has the same
methods, but every 64-bit word comes from ``os.urandom`` (the kernel's CSPRNG), all words
of a draw in one call, and is mapped to a value by the same maps as :mod:`bench.randomness.rng`.
Nothing is kept: two draws, even of the same shape from the same object, are independent,
and nothing can be replayed.

Tail of the samplers (pure functions below)
-------------------------------------------
:func:`bench.randomness.rng.laplace` returns ``sign * -ln u`` with ``u = (k + 1) 2^-53``: in units of
the scale no value exceeds ``T = 53 ln 2 = 36.74``. It is the ideal Laplace value with the
magnitude clamped at ``T`` (couple the two through the uniform: they differ only when the
ideal magnitude exceeds ``T``, which has probability ``e^-T = 2^-53``). Ignoring
floating point (see below), consider an epsilon-DP mechanism that adds independent
Laplace noise to values ``mu_i(x)`` and post-processes them. Neighbours ``x, x'`` move
``k`` values (the others are equal and independent, so they change nothing), value ``i``
by ``d_i`` scales, with ``d_i <= d_max`` and ``sum d_i <= epsilon``. With the clamp, the
density ratio of a value is still at most ``e^d_i`` except on three pieces of ``x``'s
output: its two atoms at ``mu_i +- T`` (mass ``e^-T / 2`` each) and the strip of width
``d_i`` beyond the end of ``x'``'s support (mass ``e^-T (e^d_i - 1) / 2``). Off their union
the joint ratio is at most ``e^epsilon``, so the mechanism is (epsilon, delta)-DP with
``delta = sum_i e^-T (e^d_i + 1) / 2``, maximised under the constraints by putting as many
``d_i`` as possible at ``d_max`` (:func:`clamped_laplace_delta`). When the scale is so large
that ``+-T`` scales always leave the clip range (``scale T >= span + margin``), clipping maps
the clamped and the ideal value to the same output and ``delta = 0``
(:func:`clip_absorbs_tail`). For a mechanism whose structure is unknown, the whole output
is coupled: with ``n`` Laplace and ``g`` normal values per image the total variation to the
ideal mechanism is at most ``n 2^-53 + g 2^-32``, and an (epsilon, delta0) mechanism
becomes (epsilon, delta0 + (1 + e^epsilon) TV) (:func:`coupling_delta`).

Every image is released with its own independent draws, so a claim and its delta are per
image, whatever the number of images. :func:`laplace_exposure` gives ``k``, ``d_max`` and the clip range of the built-in
Laplace mechanisms, :func:`tail_delta` the delta at one image size and
:func:`release_claim` the claim a release states.

Floating point (Mironov, CCS 2012): the values lie on a discrete grid (a 53-bit uniform,
a float64 logarithm, float32 sums), so neighbouring inputs can reach different sets of
exact outputs. The delta above is for the real-valued sampler and does not cover this; no
snapping defence is applied. Rounding released values to integers or levels blurs that
lattice but is not proven to remove it. Release claims say so.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

import torch

from bench.core.interfaces import Mechanism, PrivacyClaim
from bench.errors import BenchError
from bench.randomness import rng
from bench.randomness.streams import Streams

LAPLACE_BITS = 53
"""Bits of the uniform behind a Laplace magnitude in :func:`bench.randomness.rng.laplace`."""

NORMAL_RADIUS_BITS = 32
"""Bits of the uniform behind a Box-Muller radius in :func:`bench.randomness.rng.normal`."""

SOURCE = "os.urandom (the operating system's CSPRNG)"

_CHUNK_WORDS = 1 << 22
_SEEDS_MESSAGE = (
    "the mechanism reads Streams.seeds directly (a fused kernel with counter-based noise), "
    "which a secure release cannot honour; draw through generator.uniform/normal/laplace/integers"
)


def laplace_max_abs(bits: int = LAPLACE_BITS) -> float:
    """Returns the largest |x| of the Laplace sampler, in units of its scale: ``bits ln 2``.

    Args:
        bits: Bits of the uniform ``u = (k + 1) 2^-bits``; ``-ln u`` is largest at ``k = 0``.
    """
    return bits * math.log(2.0)


def laplace_tail_mass(bound: float) -> float:
    """Returns ``P(|X| > bound) = e^-bound`` for X ~ Laplace(0, 1).

    Args:
        bound: A non-negative magnitude in units of the scale.
    """
    return math.exp(-bound)


def normal_max_abs(bits: int = NORMAL_RADIUS_BITS) -> float:
    """Returns the largest |x| of the Box-Muller sampler: ``sqrt(2 bits ln 2)`` (6.66 for 32 bits)."""
    return math.sqrt(2.0 * bits * math.log(2.0))


def normal_cap_mass(bits: int = NORMAL_RADIUS_BITS) -> float:
    """Returns the probability that the ideal Box-Muller radius exceeds the sampler's cap: ``2^-bits``.

    Only then do the ideal and the capped value differ (the angle is shared).
    """
    return 2.0**-bits


def clamped_laplace_delta(epsilon: float, affected: int, max_shift: float, bound: float | None = None) -> float:
    """Returns the delta that clamping Laplace noise at ``+-bound`` scales adds to a pure epsilon-DP mechanism.

    ``delta = max sum_i e^-bound (e^d_i + 1) / 2`` over ``affected`` shifts with
    ``0 <= d_i <= max_shift`` and ``sum d_i <= epsilon`` (module docstring). The sum is
    convex in the shifts, so the maximum puts ``floor(epsilon / max_shift)`` of them at
    ``max_shift`` and one at the remainder.

    Args:
        epsilon: The mechanism's epsilon (the budget over all values).
        affected: How many noisy values a neighbouring change can move.
        max_shift: The largest shift of one value, in scales.
        bound: The clamp in scales; :func:`laplace_max_abs` by default.

    Returns:
        delta in [0, 1].

    Raises:
        ValueError: A negative argument.
    """
    if epsilon < 0 or affected < 0 or max_shift < 0:
        raise ValueError("epsilon, affected and max_shift must be non-negative")
    bound = laplace_max_abs() if bound is None else bound
    if affected == 0 or max_shift == 0 or epsilon == 0:
        return 0.0
    shift = min(max_shift, epsilon)
    full = min(affected, int(math.floor(epsilon / shift + 1e-9)))
    rest = min(max(epsilon - full * shift, 0.0), shift) if full < affected else 0.0
    moved = full * _exp(shift) + (_exp(rest) + affected - full - 1 if full < affected else 0.0)
    return min(1.0, 0.5 * laplace_tail_mass(bound) * (moved + affected))


def coupling_delta(epsilon: float, tail_mass: float) -> float:
    """Returns the delta added when the output differs from an ideal mechanism's with probability ``tail_mass``.

    If the ideal mechanism is (epsilon, delta0)-DP and the actual one is within total
    variation ``eta`` of it on every input, the actual one is (epsilon, delta0 + (1 +
    e^epsilon) eta)-DP.

    Args:
        epsilon: The ideal mechanism's epsilon.
        tail_mass: The total variation bound eta, e.g. ``n 2^-53`` for n Laplace values.

    Returns:
        The added delta in [0, 1].
    """
    return min(1.0, (1.0 + _exp(epsilon)) * tail_mass)


def clip_absorbs_tail(scale: float, span: float, margin: float = 0.0, bound: float | None = None) -> bool:
    """Whether clipping hides the clamp: ``scale bound >= span + margin``.

    A value in ``[lo, lo + span]`` plus noise beyond ``+-bound`` scales is clipped to an
    end of the range both with the clamped and with the ideal noise, so the outputs agree.

    Args:
        scale: The smallest Laplace scale used on the values.
        span: Width of the range the noisy value is clipped to (255 for 8-bit values).
        margin: Extra distance rounding needs before it lands on an end (0.5 for rounding
            half up to integers).
        bound: The clamp in scales; :func:`laplace_max_abs` by default.
    """
    bound = laplace_max_abs() if bound is None else bound
    return scale * bound >= span + margin


def _exp(x: float) -> float:
    return math.exp(min(x, 700.0))


@dataclass
class DrawTally:
    """Values drawn per image, summed over calls (an upper bound when streams are sliced).

    Attributes:
        laplace: Laplace values.
        normal: Standard normal values.
    """

    laplace: int = 0
    normal: int = 0

    def coupling_mass(self) -> float:
        """Returns the total variation bound ``laplace 2^-53 + normal 2^-32`` to ideal samplers."""
        return self.laplace * laplace_tail_mass(laplace_max_abs()) + self.normal * normal_cap_mass()


class SecureStreams(Streams):
    """Streams whose words come from ``os.urandom``: one fresh, independent value per draw.

    Same methods, shapes, dtypes and value maps as :class:`bench.randomness.streams.Streams`, with one
    deliberate difference: draws are not stateless (there is nothing to reproduce), so two
    identical calls return independent values. Mechanisms needing independent draws get
    them either way; ``derive`` returns new streams. ``seeds``, ``seeds_on`` and
    ``for_images`` do not exist here: a fused kernel that draws from seeds raises instead
    of releasing predictable noise.

    Args:
        count: Number of images N.
        device: Device the values are returned on (words are drawn on the CPU).
        tally: Shared counter of Laplace and normal values drawn (kept by slices and
            derived streams); a fresh one by default.
    """

    def __init__(self, count: int, device: str | torch.device = "cpu", tally: DrawTally | None = None):
        if int(count) < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        self._count = int(count)
        self.device = torch.device(device)
        self.tally = DrawTally() if tally is None else tally

    @property
    def seeds(self) -> torch.Tensor:  # type: ignore[override]
        """Not available: raises, so that no kernel silently draws counter-based noise."""
        raise BenchError(_SEEDS_MESSAGE)

    def seeds_on(self, device: str | torch.device) -> torch.Tensor:
        """Not available: raises, so that no kernel silently draws counter-based noise."""
        raise BenchError(_SEEDS_MESSAGE)

    @classmethod
    def for_images(cls, *args, **kwargs) -> "SecureStreams":
        """Not available: secure streams have no seed. Use ``SecureStreams(count, device)``."""
        raise TypeError("SecureStreams are not seeded; construct them with SecureStreams(count, device)")

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index: int | slice | Sequence[int] | torch.Tensor) -> "SecureStreams":
        if isinstance(index, int):
            count = len(range(self._count)[index : index + 1 or None])
        elif isinstance(index, slice):
            count = len(range(self._count)[index])
        else:
            picked = torch.as_tensor(index)
            count = int(picked.sum()) if picked.dtype == torch.bool else int(picked.numel())
        return SecureStreams(count, self.device, self.tally)

    def to(self, device: str | torch.device) -> "SecureStreams":
        """Returns streams of the same images drawing on another device."""
        return SecureStreams(self._count, device, self.tally)

    def derive(self, purpose: str) -> "SecureStreams":
        """Returns independent streams for another draw of the same images (every draw is fresh)."""
        return SecureStreams(self._count, self.device, self.tally)

    def _draw(
        self, fn: Callable[[torch.Tensor], torch.Tensor], shape: Sequence[int], dtype: torch.dtype
    ) -> torch.Tensor:
        shape = tuple(int(d) for d in shape)
        total = self._count * math.prod(shape)
        out = torch.empty(total, dtype=dtype, device=self.device)
        for start in range(0, total, _CHUNK_WORDS):
            n = min(_CHUNK_WORDS, total - start)
            words = torch.frombuffer(bytearray(os.urandom(8 * n)), dtype=torch.int64)
            out[start : start + n] = fn(words.to(self.device))
        return out.view(self._count, *shape)

    def uniform(self, shape: Sequence[int], dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Draws U[0, 1) values: a tensor [N, *shape] (24-bit, or 53-bit for float64)."""
        if dtype == torch.float64:
            return self._draw(lambda w: rng.uniform(w, torch.float64), shape, dtype)
        return self._draw(lambda w: rng.uniform(w, torch.float32), shape, dtype)

    def normal(self, shape: Sequence[int], dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Draws standard normal values by Box-Muller (:func:`bench.randomness.rng.normal`): [N, *shape]."""
        self.tally.normal += math.prod(int(d) for d in shape)
        return self._draw(rng.normal, shape, dtype)

    def laplace(self, shape: Sequence[int], dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Draws Laplace(0, 1) values from a sign bit and a 53-bit exponential: [N, *shape]."""
        self.tally.laplace += math.prod(int(d) for d in shape)
        return self._draw(rng.laplace, shape, dtype)

    def integers(self, high: int, shape: Sequence[int]) -> torch.Tensor:
        """Draws integers uniform in [0, high): an int64 tensor [N, *shape]."""
        if int(high) < 1:
            raise ValueError(f"high must be >= 1, got {high}")
        return self._draw(lambda w: rng.integers(w, int(high)), shape, torch.int64)


def tail_delta(
    mechanism: Mechanism, claim: PrivacyClaim | None, size: tuple[int, int], drawn: DrawTally, channels: int = 3
) -> tuple[float, str]:
    """Returns the delta the samplers' clamps add to a claim at one image size, and why.

    Built-in Laplace mechanisms (:func:`laplace_exposure`) get
    :func:`clamped_laplace_delta`, or 0 when clipping absorbs the clamp; any other
    mechanism with a claim gets :func:`coupling_delta` over every Laplace and normal value
    it drew per image.

    Args:
        mechanism: The (fitted) mechanism that released images of this size.
        claim: Its claim, or None.
        size: (height, width) of the images.
        drawn: Values drawn per image.
        channels: Channels of the images (1 grey, 3 RGB).
    """
    if claim is None:
        return 0.0, "no formal claim"
    exposure = laplace_exposure(mechanism, size, channels)
    if exposure is None:
        return (coupling_delta(claim.epsilon, drawn.coupling_mass()),
                f"coupling bound over {drawn.laplace} Laplace and {drawn.normal} normal values per image")
    if exposure.affected == 0 or clip_absorbs_tail(exposure.scale, exposure.span, exposure.margin):
        return 0.0, "clipping absorbs the clamp: noise at the clamp always lands beyond the value range"
    return (clamped_laplace_delta(claim.epsilon, exposure.affected, exposure.max_shift),
            f"{exposure.affected} noisy values move per neighbouring change, each by at most "
            f"{exposure.max_shift:.4g} scales")


class LaplaceExposure(NamedTuple):
    """How a neighbouring change meets a mechanism's Laplace noise.

    Attributes:
        affected: Noisy values a neighbouring change can move.
        max_shift: The largest move of one value, in scales.
        scale: The smallest Laplace scale (in the unit of ``span``).
        span: Width of the range noisy values are clipped to.
        margin: Rounding margin beyond the range (0.5 for rounding to integers).
    """

    affected: int
    max_shift: float
    scale: float
    span: float
    margin: float


def laplace_exposure(mechanism: Mechanism, size: tuple[int, int], channels: int = 3) -> LaplaceExposure | None:
    """Returns the exposure of a built-in Laplace mechanism on images of ``size`` and ``channels``, or None.

    dp_pix: m changed pixels move at most m cells of each of the C channels, a cell by at
    most epsilon/C scales (all m pixels in it). image_dp: every level of every cell may
    move, by at most L - 1 levels. dp_latent: every component, by at most epsilon/d scales,
    clipped to its bounds (scale and span in units of the clip width).
    """
    from bench.core.registry import mechanisms

    name, cfg = type(mechanism).name, mechanism.config
    if name not in mechanisms or type(mechanism) is not mechanisms.get(name):
        return None
    height, width = size
    if name == "dp_pix":
        cells = math.ceil(height / cfg["block"]) * math.ceil(width / cfg["block"])
        return LaplaceExposure(min(cfg["m"], cells) * channels, cfg["epsilon"] / channels,
                               mechanism.noise_scale(channels), 255.0, 0.5)
    if name == "image_dp" and cfg["epsilon"] is not None:
        if mechanism.levels == 1:
            return LaplaceExposure(0, 0.0, 0.0, 0.0, 0.0)
        scale = mechanism.noise_scale(height, width)
        cells = math.ceil(height / cfg["block"]) * math.ceil(width / cfg["block"])
        return LaplaceExposure(cells * channels, (mechanism.levels - 1) / scale, scale, mechanism.levels - 1.0, 0.5)
    if name == "dp_latent":
        dims = int(mechanism.lower.numel())
        return LaplaceExposure(dims, cfg["epsilon"] / dims, dims / cfg["epsilon"], 1.0, 0.0)
    return None


def release_claim(claim: PrivacyClaim | None, tails: dict[str, tuple[float, str]]) -> PrivacyClaim | None:
    """Returns a mechanism's claim as a secure release states it.

    Args:
        claim: The mechanism's claim, or None.
        tails: Image size -> (delta from the samplers' clamps, why), from :func:`tail_delta`.

    Returns:
        The claim with the largest tail delta added and the noise source and the
        floating-point caveat in its note; None without a claim.
    """
    if claim is None:
        return None
    added = max((delta for delta, _ in tails.values()), default=0.0)
    note = "; ".join(filter(None, [
        claim.note,
        f"delta includes {added:.3g} for the samplers' clamps (Laplace at +-{laplace_max_abs():.2f} scales, "
        "ideal mass beyond 2^-53; per image size in noise.tail of release.json)",
        f"noise from {SOURCE}, not reproducible",
        "floating-point caveat (Mironov 2012): sampled values lie on a float grid and no snapping defence is "
        "applied; rounding the released values blurs that lattice but is not proven to remove it",
    ]))
    return PrivacyClaim(claim.epsilon, min(1.0, claim.delta + added), claim.unit, note)
