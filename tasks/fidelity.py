"""Image fidelity of a release: SSIM and PSNR against the clean images.

This is the utility side of benchmarks whose dataset has no identities, such as FairFace
in the cross-camera reID paper. The paper uses FairFace only to measure the adverse task
(attribute inference); its utility, reID, cannot be measured without identities. What a
release still offers any downstream use is how much of the image survives, so these
benchmarks report the structural similarity (Wang et al. 2004: 11 x 11 Gaussian window,
sigma 1.5, on the luma channel) and the PSNR of released test images against their clean
originals. They are not the paper's utility and are labelled as such in reports.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from bench.core.config import setting
from bench.core.groups import MIN_GROUP_SIZE, demographic_groups, mean_groups
from bench.core.interfaces import Release, RunContext, Task
from bench.data.base import Splits

LUMA = (0.299, 0.587, 0.114)


@dataclass(frozen=True)
class FidelityConfig:
    """Settings of a fidelity benchmark (``tasks/presets/attributes_*.yaml``).

    Attributes:
        data: Loader options of the dataset.
        split: Split whose released images are compared with the clean ones.
        batch: Images per SSIM batch.
    """

    data: dict = field(default_factory=dict)
    split: str = "test"
    batch: int = setting(256, low=1)


def _luma(images: torch.Tensor) -> torch.Tensor:
    x = images.float()
    if x.shape[1] == 3:
        weights = torch.tensor(LUMA, device=x.device).view(1, 3, 1, 1)
        x = (x * weights).sum(1, keepdim=True)
    return x[:, :1]


def ssim(a: torch.Tensor, b: torch.Tensor, window: int = 11, sigma: float = 1.5) -> torch.Tensor:
    """Returns the mean SSIM of each image pair, on luma in [0, 255].

    Args:
        a: uint8 images [N, C, H, W].
        b: uint8 images of the same shape.
        window: Side of the Gaussian window (cut to the image size).
        sigma: Its standard deviation.

    Returns:
        float tensor [N].
    """
    x, y = _luma(a), _luma(b)
    size = min(window, x.shape[-2], x.shape[-1])
    coords = torch.arange(size, dtype=torch.float32, device=x.device) - (size - 1) / 2
    g = torch.exp(-(coords**2) / (2 * sigma**2))
    g = g / g.sum()
    kernel = (g[:, None] * g[None, :]).view(1, 1, size, size)

    def blur(t: torch.Tensor) -> torch.Tensor:
        return F.conv2d(t, kernel)

    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    mu_x, mu_y = blur(x), blur(y)
    var_x = blur(x * x) - mu_x**2
    var_y = blur(y * y) - mu_y**2
    cov = blur(x * y) - mu_x * mu_y
    index = ((2 * mu_x * mu_y + c1) * (2 * cov + c2)) / ((mu_x**2 + mu_y**2 + c1) * (var_x + var_y + c2))
    return index.mean(dim=(1, 2, 3))


def psnr(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Returns the PSNR in dB of each image pair over all channels (capped at 100 for equal images)."""
    mse = (a.float() - b.float()).pow(2).mean(dim=(1, 2, 3))
    return torch.where(mse > 0, 10 * torch.log10(255.0**2 / mse.clamp_min(1e-10)), torch.full_like(mse, 100.0))


class Fidelity(Task):
    """How much of the clean test images a release keeps (SSIM, PSNR)."""

    metrics: ClassVar[dict[str, bool]] = {"ssim": True, "psnr": True}
    primary: ClassVar[str] = "ssim"

    config_class: ClassVar[type] = FidelityConfig
    config: FidelityConfig

    def data_options(self) -> dict[str, Any]:
        """Returns the loader options of this profile."""
        return dict(self.config.data)

    def config_dict(self) -> dict[str, Any]:
        """Returns the resolved profile settings."""
        return asdict(self.config)

    def evaluate(self, clean: Splits, released: Release, ctx: RunContext) -> dict[str, float]:
        """Compares every released test image with its clean original."""
        a, b = clean[self.config.split].images, released.splits[self.config.split].images
        scores, peaks = [], []
        for start in range(0, len(a), self.config.batch):
            x = a[start : start + self.config.batch].to(ctx.device)
            y = b[start : start + self.config.batch].to(ctx.device)
            scores.append(ssim(x, y).cpu())
            peaks.append(psnr(x, y).cpu())
        per_image = torch.cat(scores)
        value = float(per_image.mean())
        peak = float(torch.cat(peaks).mean())
        test = clean[self.config.split]
        groups = demographic_groups(test.attrs, test.attr_names)
        if groups:
            ctx.groups["utility"] = (mean_groups(per_image.double().numpy(), groups, "ssim", MIN_GROUP_SIZE),
                                     "mean SSIM of each group's released test images")
        return {"ssim": value, "psnr": peak if math.isfinite(peak) else 100.0}
