"""DnCNN: shapes, residual form, training on (noisy, clean) pairs, image quality."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bench.core.interfaces import RunContext
from bench.nn.dncnn import DenoiserTraining, DnCNN, denoise_images, image_quality, to_uint8, train_denoiser
from bench.nn.images import to_input


def _ctx(tmp_path: Path) -> RunContext:
    return RunContext(device=torch.device("cpu"), seed=0, profile="smoke", data_root=None, cache_dir=tmp_path)


def _smooth_images(n: int, seed: int, size: int = 24) -> torch.Tensor:
    """Smooth colour gradients (easy to tell from white noise), uint8 [n, 3, size, size]."""
    g = torch.Generator().manual_seed(seed)
    coarse = torch.rand(n, 3, 3, 3, generator=g)
    up = torch.nn.functional.interpolate(coarse, size=(size, size), mode="bilinear", align_corners=True)
    return (up * 200 + 28).round().to(torch.uint8)


def _add_noise(images: torch.Tensor, sigma: float, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    noisy = images.float() + sigma * torch.randn(images.shape, generator=g)
    return noisy.clamp(0, 255).round().to(torch.uint8)


@pytest.mark.parametrize("channels, shape", [(3, (2, 3, 17, 23)), (1, (1, 1, 28, 28))])
def test_any_size_and_channel_count_keeps_the_shape(channels, shape):
    model = DnCNN(channels, depth=4, width=8)
    assert model(torch.randn(shape)).shape == shape


def test_output_is_input_minus_predicted_residual_and_starts_as_identity():
    torch.manual_seed(0)
    model = DnCNN(3, depth=8, width=8).eval()
    x = torch.randn(2, 3, 16, 16)
    assert torch.equal(model(x), x)
    torch.nn.init.normal_(model.body[-1].weight, std=0.1)
    assert torch.allclose(model(x), x - model.residual(x))
    assert not torch.allclose(model(x), x)
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert len(convs) == 8 and sum(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules()) == 6


def test_too_shallow_is_rejected():
    with pytest.raises(ValueError, match="depth >= 2"):
        DnCNN(3, depth=1)


def test_learns_to_remove_gaussian_noise_in_a_few_steps(tmp_path):
    clean = _smooth_images(64, seed=1, size=16)
    noisy = _add_noise(clean, sigma=25.0, seed=2)
    torch.manual_seed(0)
    model = DnCNN(3, depth=5, width=16)
    spec = DenoiserTraining(epochs=20, batch_size=16, lr=3e-3)
    info = train_denoiser(model, noisy, clean, spec, _ctx(tmp_path), seed=3)
    test_clean = _smooth_images(32, seed=4, size=16)
    test_noisy = _add_noise(test_clean, sigma=25.0, seed=5)
    denoised = denoise_images(model, test_noisy, None, torch.device("cpu"))
    mse_before = (test_noisy.float() - test_clean.float()).pow(2).mean()
    mse_after = (denoised.float() - test_clean.float()).pow(2).mean()
    assert mse_after < 0.5 * mse_before, (float(mse_before), float(mse_after), info)
    assert info["final_loss"] < info["first_loss"]
    assert image_quality(denoised, test_clean)["psnr"] > image_quality(test_noisy, test_clean)["psnr"] + 3


def test_training_is_seeded_and_crops_patches(tmp_path):
    clean = _smooth_images(16, seed=1, size=20)
    noisy = _add_noise(clean, sigma=20.0, seed=2)
    states = []
    for _ in range(2):
        torch.manual_seed(0)
        model = DnCNN(3, depth=3, width=4)
        spec = DenoiserTraining(epochs=2, batch_size=8, lr=1e-3, size=(16, 16), patch=8)
        train_denoiser(model, noisy, clean, spec, _ctx(tmp_path), seed=7)
        states.append(model.state_dict())
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])


def test_image_quality_is_perfect_for_equal_images_and_drops_with_noise():
    clean = _smooth_images(8, seed=1)
    assert image_quality(clean, clean) == {"ssim": pytest.approx(1.0), "psnr": 100.0}
    mild, strong = _add_noise(clean, 5.0, 2), _add_noise(clean, 40.0, 3)
    assert image_quality(strong, clean)["ssim"] < image_quality(mild, clean)["ssim"] < 1.0
    assert image_quality(strong, clean)["psnr"] < image_quality(mild, clean)["psnr"]
    as_inputs = image_quality(to_input(mild, None, torch.device("cpu")), to_input(clean, None, torch.device("cpu")))
    assert as_inputs["psnr"] == pytest.approx(image_quality(mild, clean)["psnr"], rel=1e-4)


def test_to_uint8_inverts_to_input():
    images = torch.randint(0, 256, (2, 3, 5, 5), dtype=torch.uint8)
    assert torch.equal(to_uint8(to_input(images, None, torch.device("cpu"))), images)
