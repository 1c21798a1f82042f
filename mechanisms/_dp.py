"""Pure maths of the formal mechanisms: sensitivities and noise scales.

Every function here is side-effect free and cites the equation it implements, so that
a reviewer can check the numbers against the papers in ``shared/papers/`` without
reading any tensor code.
"""

from __future__ import annotations

import math
from typing import TypeVar

import torch

T = TypeVar("T", float, torch.Tensor)

PIXEL_RANGE = 255
"""Largest change of one 8-bit channel value (the L1 sensitivity of one value)."""


def _require_positive(name: str, value: float) -> None:
    if not value > 0 or not math.isfinite(value):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")


def _require_int(name: str, value: int, low: int = 1) -> None:
    if int(value) != value or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


def dp_pix_sensitivity(block: int, m: int, channels: int) -> float:
    """Returns the L1 sensitivity of a pixelated image to a change of ``m`` pixels.

    Fan (2018), as used by the few-shot paper (privacy-enhanced-few-shot, Sec. II-C,
    Eq. 5): pixelation with b x b cells reduces the sensitivity of direct perturbation,
    ``255 m``, to ``255 m / b^2``. One pixel has ``channels`` values, and changing it
    moves the mean of every channel of its cell, so the L1 sensitivity of the C-channel
    pixelated image is ``255 m C / b^2``. (Omitting C, as the grey-scale original does,
    under-noises colour images C times.)

    Args:
        block: Cell side b, in pixels.
        m: Number of pixels in which neighbouring images may differ.
        channels: Number of channels C of the image.

    Raises:
        ValueError: A non-positive or non-integer argument.
    """
    _require_int("block", block)
    _require_int("m", m)
    _require_int("channels", channels)
    return PIXEL_RANGE * m * channels / block**2


def dp_pix_scale(epsilon: float, block: int, m: int, channels: int) -> float:
    """Returns the Laplace scale of DP-Pix: ``255 m C / (b^2 epsilon)``.

    Few-shot paper, Eq. 5: ``P~_b(I) = P_b(I) + L_p`` with every value of ``L_p`` drawn
    from Laplace(0, 255 m / (b^2 epsilon)); the factor C makes it epsilon-DP for colour
    images (see :func:`dp_pix_sensitivity`).

    Args:
        epsilon: Privacy budget (> 0).
        block: Cell side b, in pixels.
        m: Number of pixels in which neighbouring images may differ.
        channels: Number of channels C of the image.

    Raises:
        ValueError: A non-positive or non-integer argument.
    """
    _require_positive("epsilon", epsilon)
    return dp_pix_sensitivity(block, m, channels) / epsilon


def image_dp_levels(colours: int) -> int:
    """Returns the number of levels per channel kept by colour quantisation: ``256 / c``.

    Cross-camera reID paper, Sec. III-A: c "characterises the amount of colours to be
    kept"; a channel value v becomes the level ``floor(v / c)``. For the paper's powers
    of two that gives ``256 / c`` levels ``0 .. 256/c - 1``; for any other c in 1..256 the
    last bin is partial and there are ``floor(255 / c) + 1`` levels.

    Args:
        colours: Quantisation step c in 1..256.

    Raises:
        ValueError: c outside 1..256.
    """
    _require_int("colours", colours)
    if colours > 256:
        raise ValueError(f"colours must be an integer in 1..256, got {colours!r}")
    return 255 // colours + 1


def image_dp_cells(width: int, height: int, block: int) -> int:
    """Returns the number of b x b cells of a w x h image (ragged edge cells included).

    Equals ``w h / b^2`` of Eq. 3 when b divides w and h; otherwise the ragged cells are
    counted as whole ones, which can only enlarge the sensitivity.

    Raises:
        ValueError: A non-positive or non-integer argument.
    """
    _require_int("width", width)
    _require_int("height", height)
    _require_int("block", block)
    return math.ceil(width / block) * math.ceil(height / block)


def image_dp_sensitivity(width: int, height: int, block: int, colours: int) -> float:
    """Returns Delta_f of epsilon-image DP: ``(w h / b^2) (256/c - 1)^3``.

    Cross-camera reID paper, Eq. 3. Check: w=64, h=128, b=2, c=32 gives 702464, and
    w=h=224, b=4, c=32 gives 1075648 (Sec. IV-B). The noise of Eq. 2 is added to the
    quantised levels (values in ``0 .. 256/c - 1``), so this sensitivity is in levels.

    Args:
        width: Image width w in pixels.
        height: Image height h in pixels.
        block: Pixelation cell side b.
        colours: Quantisation step c in 1..256.

    Raises:
        ValueError: An invalid argument.
    """
    top = image_dp_levels(colours) - 1
    return float(image_dp_cells(width, height, block) * top**3)


def image_dp_scale(epsilon: float, width: int, height: int, block: int, colours: int) -> float:
    """Returns the Laplace scale of epsilon-image DP: ``Delta_f / epsilon`` (Eqs. 2-3).

    Args:
        epsilon: Privacy budget (> 0).
        width: Image width w in pixels.
        height: Image height h in pixels.
        block: Pixelation cell side b.
        colours: Quantisation step c.

    Raises:
        ValueError: An invalid argument.
    """
    _require_positive("epsilon", epsilon)
    return image_dp_sensitivity(width, height, block, colours) / epsilon


def image_dp_epsilon_factor(colours: int, channels: int = 3) -> float:
    """Returns how much larger the true epsilon is than the nominal one under Eq. 3.

    Eq. 3 bounds the change of one cell by ``(L - 1)^3`` levels, L = 256/c. The L1 change
    of a cell's C quantised channels is at most ``C (L - 1)``, which exceeds ``(L-1)^3``
    only when L = 2 (c = 128) and C > 1: there the guarantee holds at ``C epsilon``.

    Args:
        colours: Quantisation step c.
        channels: Number of channels C.

    Returns:
        ``max(1, C (L-1) / (L-1)^3)``, and 1 when L = 1 (a constant image).
    """
    top = image_dp_levels(colours) - 1
    if top == 0:
        return 1.0
    return max(1.0, channels * top / top**3)


def latent_sensitivity(lower: T, upper: T) -> T:
    """Returns the per-component sensitivity of a clipped latent vector: ``upper - lower``.

    Latent-space paper, Sec. 3.2: after clipping every component to bounds observed on
    public data, replacing the image by any other moves component j by at most
    ``upper_j - lower_j``.

    Args:
        lower: Lower clip bound(s).
        upper: Upper clip bound(s), not below ``lower``.

    Raises:
        ValueError: A bound pair with ``upper < lower``.
    """
    diff = upper - lower
    bad = bool((diff < 0).any()) if isinstance(diff, torch.Tensor) else diff < 0
    if bad:
        raise ValueError("latent clip bounds must satisfy upper >= lower")
    return diff


def latent_scale(lower: T, upper: T, epsilon: float) -> T:
    """Returns the per-component Laplace scale: ``(upper - lower) d / epsilon``.

    Latent-space paper, Sec. 3.3 and Theorem 1: the budget is split evenly over the d
    components (epsilon / d each), and component j gets Laplace noise of scale
    ``sensitivity_j / (epsilon / d)``; sequential composition gives epsilon-LDP.

    Args:
        lower: Lower clip bounds, a tensor [d] (or a float when d = 1).
        upper: Upper clip bounds, same shape.
        epsilon: Total privacy budget (> 0).

    Raises:
        ValueError: An invalid budget or bound pair.
    """
    _require_positive("epsilon", epsilon)
    dims = int(lower.numel()) if isinstance(lower, torch.Tensor) else 1
    return latent_sensitivity(lower, upper) * (dims / epsilon)
