"""Float arithmetic that gives the same bits on every CPU: what the synthetic renderers compute with.

A dataset's fingerprint is a hash of its bytes, so a renderer must produce the same bytes on
every machine. Some of torch's CPU float operations do not:

* the square root and the transcendental functions (``sqrt``, ``exp``, ``log``, ``sin``,
  ``cos``, ``tan``, ``tanh``, ``erf``, ...) go through Intel MKL's vector math library in
  torch's x86 builds (the same bits under every ``ATEN_CPU_CAPABILITY``, yet not correctly
  rounded: 5% of float32 cosines, 17% of float32 square roots), whose code path, and last
  bits, depend on the processor: an Intel Xeon and an AMD EPYC disagree;
* compound kernels (``lerp``, ``addcmul``, ``add``/``sub`` with ``alpha``, ``atan2``, ``pow``
  with a non-integer exponent, ``sigmoid``, ``norm``, float32 ``interpolate``) are
  vectorised differently per instruction set (``ATEN_CPU_CAPABILITY``), with or without a
  fused multiply-add, and ``torch.randn`` of 16 or more float32 values draws with a
  different Box-Muller kernel per instruction set;
* float reductions (``sum``, ``mean``, ``cumsum``, matrix products) may add in an order
  that depends on the vector width, the thread count or the BLAS library.

The renderers therefore use only operations that IEEE 754 rounds exactly once, the same
everywhere: ``+ - * /``, comparisons, ``minimum``/``maximum``/``clamp``, ``abs``, ``floor``,
``round``, ``where``, casts, gathers and integer arithmetic; ``torch.rsqrt`` (one IEEE
square root and one division in every kernel); ``torch.rand``/``randint``/``randperm`` with
a generator (integer bits, drawn one by one; not ``torch.multinomial``, whose one-sample
path divides by ``exponential_`` draws, made by MKL where torch has it); and the functions
here, which are built from those alone (their constants are literals or exact Python
arithmetic, never the C library's ``math.log`` and the like). They are accurate to a few
units in the last place, not correctly rounded: what matters is that every machine
computes the same sequence of operations. ``to_uint8`` is where every renderer turns its float image into bytes
(tests/unit/test_render_bytes.py hashes the floats there too).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import torch

__all__ = ["categorical", "cos", "exp", "log", "normal", "normal_from_bits", "normal_from_words", "random_bits",
           "resize_antialias", "resize_bilinear", "sin", "sincos", "sqrt", "sqrt_", "to_uint8"]


def sqrt(x: torch.Tensor) -> torch.Tensor:
    """Square root (``1 / rsqrt(x)``: two IEEE operations; 0 -> 0, negative -> nan)."""
    return torch.rsqrt(x).reciprocal_()


def sqrt_(x: torch.Tensor) -> torch.Tensor:
    """:func:`sqrt` in place, on a tensor the caller owns."""
    return x.rsqrt_().reciprocal_()


# Cody-Waite splits of pi: the leading parts have few bits, so n * part is exact for the n that occur.
_PI_F32 = (3.140625, 9.67502593994140625e-4, 1.509957990978376432e-7)  # cephes sinf's DP1-DP3, times 4
_PI_F64 = (3.14159265346825122834e+00, 1.21542010130123844986e-10)  # fdlibm's pio2_1, pio2_1t, times 2
_SIN_F32 = tuple((-1) ** k / math.factorial(2 * k + 1) for k in range(5, -1, -1))  # Taylor to r^11: error < 6e-8
_SIN_F64 = tuple((-1) ** k / math.factorial(2 * k + 1) for k in range(10, -1, -1))  # to r^21: error < 2e-18


def _horner(z: torch.Tensor, coefficients: Sequence[float]) -> torch.Tensor:
    """c0 z^(k-1) + ... + c(k-1), highest power first (one multiply and one add a step)."""
    acc = z * coefficients[0]
    for c in coefficients[1:-1]:
        acc = acc.add_(c).mul_(z)
    return acc.add_(coefficients[-1])


def _sin_near(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """sin(x - n pi) for x - n pi in [-pi/2, pi/2]."""
    wide = x.dtype == torch.float64
    parts = _PI_F64 if wide else _PI_F32
    r = x - n * parts[0]
    for part in parts[1:]:
        r = r.sub_(n * part)
    return _horner(r * r, _SIN_F64 if wide else _SIN_F32).mul_(r)


def _alternate(value: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """value * (-1)^k for integer-valued float k."""
    odd = k.to(torch.int64).bitwise_and_(1)
    return value.mul_(odd.mul_(-2).add_(1))


def sin(x: torch.Tensor) -> torch.Tensor:
    """Sine of a float32 or float64 tensor: sin(x) = (-1)^n sin(x - n pi), n the nearest integer to x / pi."""
    n = torch.round(x * (1 / math.pi))
    return _alternate(_sin_near(x, n), n)


def cos(x: torch.Tensor) -> torch.Tensor:
    """Cosine: cos(x) = (-1)^(m+1) sin(x - (m + 1/2) pi), m = floor(x / pi)."""
    m = torch.floor(x * (1 / math.pi))
    return _alternate(_sin_near(x, m + 0.5), m + 1)


def sincos(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (sin x, cos x)."""
    return sin(x), cos(x)


_LN2_HI, _LN2_LO = 6.93147180369123816490e-01, 1.90821492927058770002e-10  # fdlibm
_INV_LN2 = 1.44269504088896338700e+00  # fdlibm (a literal: math.log's last bit is the C library's)
_EXP_TAYLOR = tuple(1.0 / math.factorial(k) for k in range(13, -1, -1))


def exp(x: torch.Tensor) -> torch.Tensor:
    """Exponential, computed in float64 and returned in x's dtype (arguments clamped to [-700, 700])."""
    d = x.double().clamp(-700.0, 700.0)
    n = torch.round(d * _INV_LN2)
    r = (d - n * _LN2_HI).sub_(n * _LN2_LO)
    scale = ((n.to(torch.int64) + 1023) << 52).view(torch.float64)
    return _horner(r, _EXP_TAYLOR).mul_(scale).to(x.dtype)


_LOG_SERIES = tuple(1.0 / k for k in range(23, 0, -2))  # atanh series: 1/23, ..., 1/3, 1
_MANTISSA = (1 << 52) - 1
_ONE_BITS = 1023 << 52


def log(x: torch.Tensor) -> torch.Tensor:
    """Natural logarithm of positive normal numbers, computed in float64 and returned in x's dtype."""
    d = x.double().contiguous()
    bits = d.view(torch.int64)
    e = (bits >> 52) - 1023
    m = ((bits & _MANTISSA) | _ONE_BITS).view(torch.float64)
    big = m > math.sqrt(2.0)
    m = torch.where(big, m * 0.5, m)
    e = (e + big.to(torch.int64)).double()
    s = (m - 1.0) / (m + 1.0)
    series = _horner(s * s, _LOG_SERIES).mul_(s).mul_(2.0)
    return (e * _LN2_HI).add_((e * _LN2_LO).add_(series)).to(x.dtype)


# Acklam's rational approximation of the standard normal quantile (relative error < 1.2e-9).
_ACKLAM_A = (-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02, 1.383577518672690e+02,
             -3.066479806614716e+01, 2.506628277459239e+00)
_ACKLAM_B = (-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02, 6.680131188771972e+01,
             -1.328068155288572e+01, 1.0)
_ACKLAM_C = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00, -2.549732539343734e+00,
             4.374664141464968e+00, 2.938163982698783e+00)
_ACKLAM_D = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00, 3.754408661907416e+00, 1.0)
_LEVELS_LOG2 = 16
"""A normal draw is one of 2^16 equally likely values: the quantiles at the midpoints of 2^16 equal slices of (0, 1)."""


def _quantile(p: torch.Tensor) -> torch.Tensor:
    """Standard normal quantile of float64 p in (0, 0.5] (Acklam)."""
    central = p > 0.02425
    q = p - 0.5
    r = q * q
    mid = _horner(r, _ACKLAM_A).mul_(q).div_(_horner(r, _ACKLAM_B))
    t = sqrt_(log(torch.where(central, 0.5, p)).mul_(-2.0))
    tail = _horner(t, _ACKLAM_C).div_(_horner(t, _ACKLAM_D))
    return torch.where(central, mid, tail)


@functools.cache
def _normal_levels() -> torch.Tensor:
    """The 2^16 values of a normal draw, ascending (float32; level 2^16 - 1 - i is minus level i)."""
    half = 1 << (_LEVELS_LOG2 - 1)
    lower = _quantile((torch.arange(half, dtype=torch.float64) + 0.5) / (2 * half)).float()
    return torch.cat([lower, -lower.flip(0)])


def random_bits(shape: int | Sequence[int], generator: torch.Generator) -> torch.Tensor:
    """Uniform 16-bit integers (int64) of ``shape`` from ``generator``: what :func:`normal_from_bits` maps."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    return torch.randint(0, 1 << _LEVELS_LOG2, shape, generator=generator)


def normal_from_bits(k: torch.Tensor) -> torch.Tensor:
    """Maps uniform 16-bit integers to standard normal float32 values (a gather from :func:`_normal_levels`)."""
    return _normal_levels().index_select(0, k.reshape(-1)).view(k.shape)


def normal(shape: int | Sequence[int], generator: torch.Generator) -> torch.Tensor:
    """Standard normal float32 draws of ``shape``: one 16-bit integer from ``generator`` each, mapped to its quantile.

    The same values on every CPU (``torch.randn``'s float32 values differ between
    instruction sets). A draw is one of 2^16 values (neighbours 4e-5 apart at the
    centre); the largest magnitude is 4.33.
    """
    return normal_from_bits(random_bits(shape, generator))


def normal_from_words(words: torch.Tensor) -> torch.Tensor:
    """Standard normal float32 values of :mod:`bench.randomness.rng` words (their top 16 bits, as :func:`normal`)."""
    return normal_from_bits((words >> (64 - _LEVELS_LOG2)) & ((1 << _LEVELS_LOG2) - 1))


def categorical(probs: torch.Tensor, generator: torch.Generator, n: int | None = None) -> torch.Tensor:
    """Draws one index per row of ``probs`` [n, K] (or ``n`` indices from ``probs`` [K]) by inverting the running sum.

    Weights need not sum to 1 and may be 0 (such an index is never drawn). One float64
    uniform from ``generator`` per draw.
    """
    p = probs.double()
    if p.dim() == 1:
        p = p.expand(int(n if n is not None else 1), -1)
    running = [p[:, 0]]
    for k in range(1, p.shape[1]):  # summed left to right
        running.append(running[-1] + p[:, k])
    target = torch.rand(p.shape[0], dtype=torch.float64, generator=generator).mul_(running[-1])
    index = torch.zeros(p.shape[0], dtype=torch.int64)
    for edge in running[:-1]:
        index += target >= edge
    return index


@functools.lru_cache(maxsize=64)
def _linear_taps(n_in: int, n_out: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Source indices and weights of bilinear resampling along one axis (align_corners=False, no antialiasing)."""
    scale = n_in / n_out
    lo, hi, weight = [], [], []
    for o in range(n_out):
        src = max((o + 0.5) * scale - 0.5, 0.0)
        i = min(int(src), n_in - 1)
        lo.append(i)
        hi.append(min(i + 1, n_in - 1))
        weight.append(min(max(src - i, 0.0), 1.0))
    w = torch.tensor(weight, dtype=torch.float64)
    return torch.tensor(lo), torch.tensor(hi), w


def _double(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Bilinear upsampling by 2 along ``dim`` (-2 or -1): 3/4 of each sample plus 1/4 of its neighbour on that side.

    At the ends the neighbour is the sample itself (``F.interpolate`` takes the sample
    alone there: equal up to rounding).
    """
    near, far = x * 0.75, x * 0.25
    n = x.shape[dim]
    out = x.new_empty(x.shape[: x.dim() + dim + 1] + (2,) + x.shape[x.dim() + dim + 1:])
    if dim == -1:
        even, odd = out[..., 0], out[..., 1]
    else:
        even, odd = out[..., 0, :], out[..., 1, :]

    def part(t: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
        return t.narrow(dim, lo, hi - lo)

    torch.add(part(near, 1, n), part(far, 0, n - 1), out=part(even, 1, n))
    torch.add(part(near, 0, 1), part(far, 0, 1), out=part(even, 0, 1))
    torch.add(part(near, 0, n - 1), part(far, 1, n), out=part(odd, 0, n - 1))
    torch.add(part(near, n - 1, n), part(far, n - 1, n), out=part(odd, n - 1, n))
    shape = list(x.shape)
    shape[dim] = 2 * n
    return out.view(shape)


def _along(x: torch.Tensor, dim: int, n_out: int) -> torch.Tensor:
    if n_out == 2 * x.shape[dim]:
        return _double(x, dim)
    lo, hi, w = _linear_taps(x.shape[dim], n_out)
    view = [1] * x.dim()
    view[dim] = n_out
    w = w.to(x.dtype).view(view)
    return (x.index_select(dim, lo) * (1 - w)).add_(x.index_select(dim, hi) * w)


def resize_bilinear(x: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Bilinear resampling of [..., H, W] to ``size`` (what ``F.interpolate(mode="bilinear", align_corners=False)``
    computes, up to rounding; no antialiasing): the width first, then the height."""
    return _along(_along(x, -1, size[1]), -2, size[0])


@functools.lru_cache(maxsize=64)
def _antialias_taps(n_in: int, n_out: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Source indices [n_out, taps] and weights [n_out, taps] of antialiased linear resampling along one axis.

    The triangle filter of ``F.interpolate(mode="bilinear", antialias=True)``, widened by
    the scale when shrinking; unused taps have weight 0.
    """
    scale = n_in / n_out
    support = max(scale, 1.0)
    inv = 1.0 / scale if scale >= 1.0 else 1.0
    rows = []
    for o in range(n_out):
        centre = scale * (o + 0.5)
        lo = max(int(centre - support + 0.5), 0)
        hi = min(int(centre + support + 0.5), n_in)
        w = [max(0.0, 1.0 - abs((j - centre + 0.5) * inv)) for j in range(lo, hi)]
        total = math.fsum(w)  # correctly rounded (sum() compensates from Python 3.12 on)
        rows.append([(j, wj / total) for j, wj in zip(range(lo, hi), w)])
    taps = max(len(r) for r in rows)
    index = torch.tensor([[r[min(t, len(r) - 1)][0] for t in range(taps)] for r in rows])
    weight = torch.tensor([[r[t][1] if t < len(r) else 0.0 for t in range(taps)] for r in rows], dtype=torch.float64)
    return index, weight


def _along_antialias(x: torch.Tensor, dim: int, n_out: int) -> torch.Tensor:
    index, weight = _antialias_taps(x.shape[dim], n_out)
    view = [1] * x.dim()
    view[dim] = n_out
    out = None
    for t in range(index.shape[1]):  # taps added in a fixed order
        term = x.index_select(dim, index[:, t]) * weight[:, t].to(x.dtype).view(view)
        out = term if out is None else out.add_(term)
    return out


def resize_antialias(x: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Antialiased linear resampling of [..., H, W] to ``size`` (the filter of ``F.interpolate(mode="bilinear",
    antialias=True)``, up to rounding): the width first, then the height."""
    return _along_antialias(_along_antialias(x, -1, size[1]), -2, size[0])


def to_uint8(img: torch.Tensor) -> torch.Tensor:
    """[0, 1] floats -> uint8: times 255, rounded half to even, clamped."""
    return img.clamp(0.0, 1.0).mul(255.0).round_().to(torch.uint8)
