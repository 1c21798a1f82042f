"""DnCNN (Zhang et al. 2017): a residual denoiser, its training on image pairs and its quality.

The network predicts the residual ``R(y)`` of its input ``y`` (noise, blur, blocks: what the
mechanism added) and returns ``y - R(y)``. The few-shot privacy paper uses a "lighter
version" with 8 layers; depth and width are configurable. It is fully convolutional, so
it denoises any image size and channel count it was built for.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bench.core.curves import EpochValues
from bench.core.interfaces import RunContext
from bench.nn.images import to_input


class DnCNN(nn.Module):
    """Conv+ReLU, (depth - 2) x Conv+BN+ReLU, Conv: the residual denoiser of Zhang et al.

    The last convolution starts at zero, so an untrained DnCNN is the identity and training
    only ever moves it away from "do nothing" where that lowers the loss.

    Args:
        channels: Image channels (input and output).
        depth: Convolution layers (17 in DnCNN, 8 in the few-shot paper).
        width: Filters of the hidden layers (64 in DnCNN).

    Raises:
        ValueError: ``depth`` below 2 or ``width``/``channels`` below 1.
    """

    def __init__(self, channels: int = 3, depth: int = 8, width: int = 64):
        super().__init__()
        if depth < 2 or width < 1 or channels < 1:
            raise ValueError(f"DnCNN needs depth >= 2, width >= 1, channels >= 1; got {depth}, {width}, {channels}")
        layers: list[nn.Module] = [nn.Conv2d(channels, width, 3, padding=1), nn.ReLU(inplace=True)]
        for _ in range(depth - 2):
            layers += [nn.Conv2d(width, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True)]
        last = nn.Conv2d(width, channels, 3, padding=1)
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)
        layers.append(last)
        self.body = nn.Sequential(*layers)

    def residual(self, x: torch.Tensor) -> torch.Tensor:
        """Returns the predicted residual R(y) of inputs [N, C, H, W]."""
        return self.body(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Returns the denoised images ``x - R(x)``."""
        return x - self.body(x)


@dataclass(frozen=True)
class DenoiserTraining:
    """How a DnCNN is trained on (released, clean) pairs.

    Attributes:
        epochs: Passes over the pairs.
        batch_size: Pairs per step (capped at the number of pairs).
        lr: Adam learning rate (halved after each third of the steps).
        size: Side (or (h, w)) both images are resized to first, or None for their size.
        patch: Side of the random square crops trained on, or None for whole images.
        desc: Label of the progress bar.
    """

    epochs: int
    batch_size: int
    lr: float
    size: int | tuple[int, int] | None = None
    patch: int | None = None
    desc: str = "denoiser epochs"


def train_denoiser(
    model: DnCNN, noisy: torch.Tensor, clean: torch.Tensor, spec: DenoiserTraining, ctx: RunContext, seed: int
) -> dict[str, Any]:
    """Trains a DnCNN in place to map released images to their clean originals (MSE).

    Minimising ``MSE(y - R(y), x)`` is the residual loss of Zhang et al.,
    ``||R(y) - (y - x)||^2``. Batches get the same random flip and crop on both sides.

    Args:
        model: The denoiser (on ``ctx.device``); left in eval mode.
        noisy: uint8 released images [N, C, H, W].
        clean: uint8 clean originals of the same shape.
        spec: How to train.
        ctx: The run's context.
        seed: Seed of the batch order, flips and crops.

    Returns:
        Facts about the training (steps, first and final loss, seconds).
    """
    started = time.perf_counter()
    g = torch.Generator().manual_seed(seed)
    batch_size = min(spec.batch_size, len(noisy))
    steps_per_epoch = max(1, len(noisy) // batch_size)
    total = spec.epochs * steps_per_epoch
    optimiser = torch.optim.Adam(model.parameters(), lr=spec.lr)
    schedule = torch.optim.lr_scheduler.StepLR(optimiser, step_size=max(1, total // 3), gamma=0.5)
    model.train()
    losses = []
    epoch_loss = EpochValues()
    for _ in ctx.progress(range(spec.epochs), total=spec.epochs, desc=spec.desc):
        order = torch.randperm(len(noisy), generator=g)
        for step in range(steps_per_epoch):
            batch = order[step * batch_size : (step + 1) * batch_size]
            pair = torch.cat([to_input(noisy[batch], spec.size, ctx.device),
                              to_input(clean[batch], spec.size, ctx.device)], 1)
            pair = _flip_and_crop(pair, spec.patch, g)
            released, target = pair.chunk(2, dim=1)
            loss = F.mse_loss(model(released), target)
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
            schedule.step()
            losses.append(loss.detach())
            epoch_loss.add(loss)
        epoch_loss.close_epoch()
    model.eval()
    history = torch.stack(losses).cpu() if losses else torch.full((1,), float("nan"))
    last_epoch = history[-max(1, steps_per_epoch):]
    return {"steps": total, "first_loss": float(history[0]), "final_loss": float(last_epoch.mean()),
            "seconds": time.perf_counter() - started, "curve": {"loss": epoch_loss.means}}


def _flip_and_crop(x: torch.Tensor, patch: int | None, g: torch.Generator) -> torch.Tensor:
    """Flips each image horizontally at random and crops one random ``patch`` square of it."""
    n, _, h, w = x.shape
    flipped = (torch.rand(n, generator=g) < 0.5).to(x.device)
    x = torch.where(flipped[:, None, None, None], x.flip(3), x)
    if patch is None or (patch >= h and patch >= w):
        return x
    ph, pw = min(patch, h), min(patch, w)
    top = torch.randint(0, h - ph + 1, (n,), generator=g).to(x.device)
    left = torch.randint(0, w - pw + 1, (n,), generator=g).to(x.device)
    rows = (top[:, None] + torch.arange(ph, device=x.device)[None])[:, :, None]
    cols = (left[:, None] + torch.arange(pw, device=x.device)[None])[:, None, :]
    batch = torch.arange(n, device=x.device)[:, None, None]
    return x.permute(0, 2, 3, 1)[batch, rows, cols].permute(0, 3, 1, 2).contiguous()


@torch.no_grad()
def denoise_images(
    model: nn.Module, images: torch.Tensor, size: int | tuple[int, int] | None, device: torch.device, batch: int = 256
) -> torch.Tensor:
    """Denoises uint8 images and returns them as uint8 (CPU), at ``size`` (None: their size).

    Args:
        model: A trained denoiser (float inputs in [-1, 1]).
        images: uint8 images [N, C, H, W].
        size: Side (or (h, w)) the denoiser works at.
        device: Where the model runs.
        batch: Images per forward pass.
    """
    model.eval()
    out = [to_uint8(model(to_input(images[i : i + batch], size, device))).cpu() for i in range(0, len(images), batch)]
    return torch.cat(out) if out else images.clone()


def to_uint8(x: torch.Tensor) -> torch.Tensor:
    """Maps network inputs in [-1, 1] back to uint8 images (clamped, rounded)."""
    return ((x.clamp(-1.0, 1.0) + 1.0) * 127.5).round().to(torch.uint8)


def image_quality(images: torch.Tensor, reference: torch.Tensor) -> dict[str, float]:
    """Returns the mean SSIM and PSNR (dB) of images against their references (torchmetrics).

    Both are computed on RGB (or grey) values in [0, 1]: SSIM with an 11 x 11 Gaussian
    window (sigma 1.5, the window cut to the image when smaller), PSNR per image over all
    its values (capped at 100 dB for identical images), then averaged.

    Args:
        images: uint8 images [N, C, H, W], or floats in [-1, 1].
        reference: Their clean originals, in the same form and shape.
    """
    from torchmetrics.functional.image import peak_signal_noise_ratio, structural_similarity_index_measure

    a, b = _unit(images), _unit(reference)
    window = min(11, *a.shape[-2:])
    window -= 1 - window % 2
    ssim = structural_similarity_index_measure(a, b, data_range=1.0, kernel_size=window)
    psnr = peak_signal_noise_ratio(a, b, data_range=1.0, reduction="none", dim=(1, 2, 3))
    return {"ssim": float(ssim), "psnr": float(psnr.clamp(max=100.0).mean())}


def _unit(x: torch.Tensor) -> torch.Tensor:
    if x.dtype == torch.uint8:
        return x.float() / 255.0
    return (x.float().clamp(-1.0, 1.0) + 1.0) / 2.0
