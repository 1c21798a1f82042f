"""The pure maths of mechanisms/_dp.py, and the noise the mechanisms actually add."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bench.core.registry import mechanisms
from bench.randomness.streams import Streams
from mechanisms import _dp


def test_dp_pix_scale_includes_channels():
    assert _dp.dp_pix_scale(3.0, 4, 1, 3) == pytest.approx(255 * 1 * 3 / (16 * 3.0))
    assert _dp.dp_pix_scale(1.0, 2, 5, 1) == pytest.approx(255 * 5 / 4)
    assert _dp.dp_pix_scale(3.0, 4, 1, 3) == 3 * _dp.dp_pix_scale(3.0, 4, 1, 1)


@pytest.mark.parametrize(
    "args",
    [(0.0, 4, 1, 3), (-1.0, 4, 1, 3), (math.inf, 4, 1, 3), (1.0, 0, 1, 3), (1.0, 2.5, 1, 3), (1.0, 4, 0, 3), (1.0, 4, 1, 0)],
)
def test_dp_pix_scale_rejects_invalid_arguments(args):
    with pytest.raises(ValueError):
        _dp.dp_pix_scale(*args)


def test_image_dp_sensitivity_matches_the_paper():
    assert _dp.image_dp_sensitivity(64, 128, 2, 32) == 702464
    assert _dp.image_dp_sensitivity(224, 224, 4, 32) == 1075648
    assert _dp.image_dp_sensitivity(64, 128, 1, 1) == 64 * 128 * 255**3
    assert _dp.image_dp_sensitivity(64, 128, 4, 256) == 0


def test_image_dp_counts_ragged_cells_as_whole_ones():
    assert _dp.image_dp_cells(65, 128, 2) == 33 * 64
    assert _dp.image_dp_sensitivity(65, 128, 2, 32) > _dp.image_dp_sensitivity(64, 128, 2, 32)


def test_image_dp_scale_and_levels():
    assert _dp.image_dp_scale(2.0, 64, 128, 2, 32) == pytest.approx(702464 / 2)
    assert [_dp.image_dp_levels(c) for c in (1, 16, 32, 256)] == [256, 16, 8, 1]
    assert [_dp.image_dp_levels(c) for c in (3, 48, 255)] == [86, 6, 2]
    assert _dp.image_dp_sensitivity(4, 4, 2, 48) == 4 * 5**3
    for bad in (0, 2.5, 257, 512):
        with pytest.raises(ValueError):
            _dp.image_dp_levels(bad)


def test_image_dp_epsilon_factor_only_for_two_levels():
    assert _dp.image_dp_epsilon_factor(32) == 1.0
    assert _dp.image_dp_epsilon_factor(128, channels=3) == 3.0
    assert _dp.image_dp_epsilon_factor(128, channels=1) == 1.0
    assert _dp.image_dp_epsilon_factor(256) == 1.0


def test_latent_sensitivity_and_scale():
    lower, upper = torch.tensor([-1.0, 0.0, 2.0]), torch.tensor([1.0, 0.5, 2.0])
    assert torch.equal(_dp.latent_sensitivity(lower, upper), torch.tensor([2.0, 0.5, 0.0]))
    assert torch.allclose(_dp.latent_scale(lower, upper, 6.0), torch.tensor([1.0, 0.25, 0.0]))
    assert _dp.latent_scale(-1.0, 1.0, 4.0) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        _dp.latent_sensitivity(upper, lower)
    with pytest.raises(ValueError):
        _dp.latent_scale(lower, upper, 0.0)


def laplace_scale_estimate(noise: np.ndarray) -> float:
    """Maximum-likelihood Laplace scale of centred samples: the mean absolute value."""
    return float(np.abs(noise).mean())


@pytest.mark.parametrize("epsilon,block,m,channels", [(3.0, 4, 1, 3), (10.0, 2, 1, 3), (5.0, 4, 2, 1)])
def test_dp_pix_empirical_noise_scale_matches_formula(epsilon, block, m, channels):
    n, size = 128, 32
    x = torch.full((n, channels, size, size), 128, dtype=torch.uint8)
    out = mechanisms.get("dp_pix")(epsilon=epsilon, block=block, m=m).apply(
        x, generator=Streams.for_images(1, "dp_maths", n)
    )
    noise = out[:, :, ::block, ::block].double().numpy() - 128.0
    expected = _dp.dp_pix_scale(epsilon, block, m, channels)
    assert expected < 25, "the test needs noise that rarely reaches the clip"
    rounding = 1.0 / 12 / expected
    assert laplace_scale_estimate(noise) == pytest.approx(expected, rel=0.03 + rounding)


@pytest.mark.parametrize("block,colours,levels_scale", [(4, 4, 3.0), (2, 1, 6.0), (4, 16, 1.0)])
def test_image_dp_empirical_noise_scale_matches_formula(block, colours, levels_scale):
    n, size = 256, 16
    epsilon = _dp.image_dp_sensitivity(size, size, block, colours) / levels_scale
    x = torch.full((n, 3, size, size), 128, dtype=torch.uint8)
    out = mechanisms.get("image_dp")(epsilon=epsilon, block=block, colours=colours).apply(
        x, generator=Streams.for_images(2, "dp_maths", n)
    )
    levels = out[:, :, ::block, ::block].double().numpy() // colours
    noise = levels - 128 // colours
    expected = _dp.image_dp_scale(epsilon, size, size, block, colours)
    assert expected == pytest.approx(levels_scale)
    top = _dp.image_dp_levels(colours) - 1 - 128 // colours
    unclipped = noise[(noise > -(128 // colours)) & (noise < top)]
    clipped_tail = 1 - np.exp(-min(128 // colours, top) / expected)
    assert clipped_tail > 0.99, "the test needs noise that rarely reaches the clip"
    rounding = 1.0 / 12 / expected
    assert laplace_scale_estimate(unclipped) == pytest.approx(expected, rel=0.05 + rounding)
