"""Counter-based random numbers: pure functions of (image seed, counter) on int64 tensors.

Every image's randomness is a SplittableRandom stream (Steele, Lea and Flood, "Fast
splittable pseudorandom number generators", OOPSLA 2014), the generator of Java's
``java.util.SplittableRandom``. An image seed ``s`` is the parent seed, and the image's
stream is the parent's first ``split()``:

* ``state = mix64(s + GOLDEN)`` and ``gamma = mix_gamma(s + 2 GOLDEN)``;
* word ``k`` (k = 0, 1, ...) is ``mix64(state + (k + 1) gamma)`` modulo 2^64.

Word ``k`` therefore depends only on the image's seed and on ``k``: draws are made for a
whole batch at once, with no loop over images and no generator state, in the same way on
every device, and a batch gives exactly the values of its images drawn one by one. Each
image has its own odd ``gamma``, so two images' streams are distinct Weyl sequences and
do not overlap the way offsets into one sequence can.

The words are turned into values by the fixed maps below (``uniform``, ``normal`` and
``normals``, ``laplace``, ``integers``); their integer parts are exact on every device, and their
floating-point parts agree to the last bit or two of a float.

Arithmetic is int64 with wrap-around, as in C's uint64_t: ``_lshr`` is the logical
shift, and the multiplier constants are the unsigned ones written as signed integers.
Eagerly on the CPU at one thread, :func:`words` runs its integer arithmetic on numpy's
uint64 views of the same buffers (:func:`_uses_numpy`): the same words, exactly.
"""

from __future__ import annotations

import math

import numpy as np
import torch

VERSION = 2
"""Bump when any map from seeds to values changes: it is part of every release's cache key and,
through :func:`bench.cell.protocol.code_versions`, of every cell key. 2: :meth:`bench.randomness.streams.Streams.normal`
draws two values a word (:func:`normals`)."""

GOLDEN = -7046029254386353131
"""0x9E3779B97F4A7C15, the golden-ratio gamma of SplitMix64."""
_GOLDEN2 = 4354685564936845354  # 2 GOLDEN modulo 2^64

_MIX64_A = -4658895280553007687  # 0xBF58476D1CE4E5B9
_MIX64_B = -7723592293110705685  # 0x94D049BB133111EB
_GAMMA_A = -49064778989728563  # 0xFF51AFD7ED558CCD
_GAMMA_B = -4265267296055464877  # 0xC4CEB9FE1A85EC53
_GAMMA_FLIP = -6148914691236517206  # 0xAAAAAAAAAAAAAAAA
_GAMMA_MIN_TRANSITIONS = 24
_M1 = 0x5555555555555555
_M2 = 0x3333333333333333
_M4 = 0x0F0F0F0F0F0F0F0F
_H01 = 0x0101010101010101
_LOW53 = (1 << 53) - 1
_LOW24 = (1 << 24) - 1


def _lshr(x: torch.Tensor, n: int) -> torch.Tensor:
    """Logical right shift of int64 values seen as uint64."""
    return (x >> n).bitwise_and_((1 << (64 - n)) - 1)


def _xor_lshr_(z: torch.Tensor, n: int) -> torch.Tensor:
    """``z ^= z >>> n`` in place, on a tensor the caller owns."""
    z ^= _lshr(z, n)
    return z


def _uses_numpy(z: torch.Tensor) -> bool:
    """Whether int64 ``z``'s integer maps run on numpy's uint64: eagerly, on the CPU, at one thread.

    torch's int64 kernels lack a vectorised 64-bit multiply and a logical shift on AVX2
    (0.5-0.7 ns a value for ``mul_``, against numpy's 0.23; a mask after every shift), so
    numpy makes eager gaussian_noise 1.04-1.15x faster at one thread. numpy runs on one
    thread, and at two torch's parallel kernels are faster; compiled kernels never take it.
    """
    return (not torch.compiler.is_compiling() and z.device.type == "cpu" and z.dtype == torch.int64
            and torch.get_num_threads() == 1)


_MIX64_STEPS_U64 = tuple((np.uint64(shift), np.uint64(factor & 0xFFFFFFFFFFFFFFFF))
                         for shift, factor in ((30, _MIX64_A), (27, _MIX64_B)))


def _mix64_numpy_(z: np.ndarray) -> None:
    """:func:`_mix64_` on a uint64 array, in place."""
    spare = np.empty_like(z)
    for shift, factor in _MIX64_STEPS_U64:
        z ^= np.right_shift(z, shift, out=spare)
        z *= factor
    z ^= np.right_shift(z, np.uint64(31), out=spare)


def _mix64_(z: torch.Tensor) -> torch.Tensor:
    """:func:`mix64` in place, on a tensor the caller owns.

    Eager kernels pay for every fresh intermediate buffer (eager gaussian_noise took 1.3x
    as long with them), so the per-value maps update their own intermediates in place;
    compiled kernels fuse either form into one pass.
    """
    if _uses_numpy(z):
        _mix64_numpy_(z.numpy().view(np.uint64))
        return z
    _xor_lshr_(z, 30).mul_(_MIX64_A)
    _xor_lshr_(z, 27).mul_(_MIX64_B)
    return _xor_lshr_(z, 31)


def mix64(z: torch.Tensor) -> torch.Tensor:
    """SplitMix64's output function (Stafford's Mix13) on int64 values seen as uint64."""
    return _mix64_(z.clone())


def _popcount(x: torch.Tensor) -> torch.Tensor:
    x = x - (_lshr(x, 1) & _M1)
    x = (x & _M2) + (_lshr(x, 2) & _M2)
    x = (x + _lshr(x, 4)) & _M4
    return _lshr(x * _H01, 56)


def mix_gamma(z: torch.Tensor) -> torch.Tensor:
    """SplittableRandom's ``mixGamma``: an odd increment with at least 24 bit transitions."""
    z = (z ^ _lshr(z, 33)) * _GAMMA_A
    z = (z ^ _lshr(z, 33)) * _GAMMA_B
    z = (z ^ _lshr(z, 33)) | 1
    sparse = _popcount(z ^ _lshr(z, 1)) < _GAMMA_MIN_TRANSITIONS
    return torch.where(sparse, z ^ _GAMMA_FLIP, z)


def stream_keys(seeds: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns the (state, gamma) of every image's stream.

    Args:
        seeds: int64 [N], one seed per image.

    Returns:
        Two int64 tensors [N].
    """
    return mix64(seeds + GOLDEN), mix_gamma(seeds + _GOLDEN2)


def words(seeds: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
    """Returns word ``counters[j]`` of every image's stream: int64 [N, *counters.shape].

    Args:
        seeds: int64 [N], one seed per image.
        counters: int64 tensor of non-negative word indices (the same for every image).
    """
    state, gamma = stream_keys(seeds)
    view = (-1,) + (1,) * counters.dim()
    if _uses_numpy(counters):
        z = torch.empty((len(seeds), *counters.shape), dtype=torch.int64)
        unsigned = z.numpy().view(np.uint64)
        np.multiply((counters + 1).numpy().view(np.uint64), gamma.view(view).numpy().view(np.uint64), out=unsigned)
        unsigned += state.view(view).numpy().view(np.uint64)
        return _mix64_(z)
    z = (counters + 1) * gamma.view(view)
    return _mix64_(z.add_(state.view(view)))


def counters(shape: tuple[int, ...] | torch.Size, device: torch.device | str) -> torch.Tensor:
    """Returns the word index of every value of one image's draw of ``shape``: 0, 1, ... in C order."""
    return torch.arange(math.prod(shape), dtype=torch.int64, device=device).view(tuple(shape))


def uniform(w: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Maps words to U[0, 1): the top 24 bits for float32 (and lower), the top 53 for float64."""
    if dtype == torch.float64:
        return _lshr(w, 11).to(torch.float64) * 2.0**-53
    return (_lshr(w, 40).to(torch.float32) * 2.0**-24).to(dtype)


def _polar(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Box-Muller's radius ``sqrt(-2 ln u)`` (u in (0, 1] from bits 32-63) and angle (bits 8-31) of words."""
    radius = _lshr(w, 32).add_(1).to(torch.float32).mul_(2.0**-32).log_().mul_(-2.0).sqrt_()
    angle = (w >> 8).bitwise_and_(_LOW24).to(torch.float32).mul_(2.0 * math.pi * 2.0**-24)
    return radius, angle


def normal(w: torch.Tensor) -> torch.Tensor:
    """Maps words to standard normal float32 values by Box-Muller, one word a value.

    Bits 32-63 give the radius ``sqrt(-2 ln u)`` with u in (0, 1], bits 8-31 the angle;
    the cosine branch is kept. The largest value is sqrt(2 ln 2^32) = 6.66.
    """
    radius, angle = _polar(w)
    return radius.mul_(angle.cos_())


def normals(seeds: torch.Tensor, count: int) -> torch.Tensor:
    """Returns the first ``count`` standard normal float32 values of every image's stream: [N, count].

    Box-Muller with both branches, two values a word: with ``m = ceil(count / 2)``, word
    ``k < m`` gives value ``k`` (``r cos t``) and value ``m + k`` (``r sin t``), radius and
    angle as in :func:`normal` (the same bits, the same largest value). A draw takes half
    the words and logarithms of :func:`normal`'s: gaussian_noise's eager kernel runs 1.6-1.75x
    faster at one thread.
    """
    half = (count + 1) // 2
    radius, angle = _polar(words(seeds, counters((half,), seeds.device)))
    if torch.compiler.is_compiling():
        both = torch.cat((radius * torch.cos(angle), radius * torch.sin(angle)), 1)
    else:  # written in place: eager kernels pay for every fresh buffer (see _mix64_)
        both = torch.empty((len(seeds), 2 * half), dtype=torch.float32, device=seeds.device)
        torch.cos(angle, out=both[:, :half]).mul_(radius)
        torch.mul(angle.sin_(), radius, out=both[:, half:])
    return both if 2 * half == count else both[:, :count].contiguous()


def laplace(w: torch.Tensor) -> torch.Tensor:
    """Maps words to Laplace(0, 1) float64 values: a sign bit and a 53-bit exponential.

    The sign is the top bit; the magnitude is ``-ln u`` with u = (k + 1) 2^-53 from the
    low 53 bits, so the tail is represented down to probabilities of 2^-53 (|x| <= 36.7).
    """
    magnitude = -torch.log((w & _LOW53).to(torch.float64).add(1.0) * 2.0**-53)
    return torch.where(w < 0, -magnitude, magnitude)


def integers(w: torch.Tensor, high: int) -> torch.Tensor:
    """Maps words to integers in [0, high): ``floor(u high)`` with a 53-bit uniform u.

    The bias is at most high 2^-53 per value.
    """
    return (uniform(w, torch.float64) * high).floor().to(torch.int64).clamp_(max=high - 1)
