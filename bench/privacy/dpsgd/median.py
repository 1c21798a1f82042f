"""The DP-ViT paper's per-layer median clipping (Sec. 3.1-3.2, Eqs. 9-13) and its Opacus optimizer.

A "layer" is one parameter tensor, as in Opacus's per-layer clipping. For each sample u,
the threshold Z_u is the median of its L per-layer gradient norms (Eq. 9); every layer
gradient is clipped to norm Z_u (Eq. 10); the noise is scaled by Z̄_u = Z_u + α (Eq. 12).

Reading of Eq. 13: it writes the noise inside the per-sample sum, but Eq. 11 (its
non-adaptive form) is the usual DP-SGD step with one Gaussian draw per batch. We take ONE
noise draw per step with std σ · max_u Z̄_u over the batch (α alone for an empty batch),
the only batch-level scale that covers every sample's Z̄_u.

Why no ε is backed: after clipping each of L layers to Z_u, a sample's gradient has L2
norm up to sqrt(L) · Z_u, not Z_u + α, so even a fixed Z would need sqrt(L) times the
noise; and Z_u is computed from the private sample's own gradients (and the noise scale
from the batch maximum), so the noise level itself depends on private data. The
accountant's ε for σ is therefore nominal.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from opacus.optimizers.optimizer import DPOptimizer, _check_processed_flag, _generate_noise, _mark_as_processed
from torch.optim import Optimizer


def layer_norms(grad_samples: Sequence[torch.Tensor]) -> torch.Tensor:
    """Returns the per-sample L2 norm of each layer's gradient.

    Args:
        grad_samples: One per-sample gradient tensor [B, ...] per layer.

    Returns:
        Norms [B, L].
    """
    return torch.stack([g.reshape(len(g), math.prod(g.shape[1:])).norm(2, dim=1) for g in grad_samples], dim=1)


def median_threshold(norms: torch.Tensor) -> torch.Tensor:
    """Eq. 9: each sample's median layer norm (mean of the two middle ones for an even count).

    Args:
        norms: Per-layer gradient norms [B, L], L ≥ 1.

    Returns:
        Thresholds Z [B].
    """
    ordered = norms.sort(dim=1).values
    count = norms.shape[1]
    return 0.5 * (ordered[:, (count - 1) // 2] + ordered[:, count // 2])


def clip_per_layer(norms: torch.Tensor, thresholds: torch.Tensor) -> torch.Tensor:
    """Eq. 10: the factors 1 / max(1, ||h^j_u|| / Z_u) that clip each layer to norm Z_u.

    Args:
        norms: Per-layer gradient norms [B, L].
        thresholds: Per-sample thresholds Z [B].

    Returns:
        Clip factors [B, L] in [0, 1] (a zero gradient stays zero whatever its factor).
    """
    tiny = torch.finfo(norms.dtype).tiny
    return (thresholds[:, None] / norms.clamp_min(tiny)).clamp(max=1.0)


def sensitivity(thresholds: torch.Tensor, alpha: float) -> float:
    """Eq. 12 over a batch: max_u (Z_u + α), the scale of the batch's one noise draw.

    Args:
        thresholds: Per-sample thresholds Z [B] (B may be 0).
        alpha: Eq. 12's boundary, so the noise never vanishes.

    Returns:
        The noise scale in gradient-norm units (``alpha`` for an empty batch).
    """
    if thresholds.numel() == 0:
        return float(alpha)
    return float(thresholds.max()) + float(alpha)


class MedianPerLayerOptimizer(DPOptimizer):
    """Opacus ``DPOptimizer`` with the paper's per-layer median clipping and adaptive noise.

    ``clip_and_accumulate`` clips each layer of each sample to that sample's median layer
    norm and adds the result into ``p.summed_grad`` (Opacus's accumulator); ``add_noise``
    adds one Gaussian draw of std σ · max_u (Z_u + α) and writes ``p.grad``. Scaling by
    ``expected_batch_size`` (loss reduction "mean"), the accountant hook and the wrapped
    optimizer's step are Opacus's. With virtual batches (several ``clip_and_accumulate``
    per step), the noise uses the largest scale seen since the last step.

    Args:
        optimizer: The wrapped optimizer.
        noise_multiplier: σ.
        alpha: Eq. 12's boundary α.
        expected_batch_size: Denominator of the mean (Poisson batches vary in size).
        loss_reduction: ``mean`` or ``sum``, as the loss was reduced.
        generator: Generator of the noise (on the parameters' device).
        secure_mode: Opacus's floating-point-attack-resistant noise.
    """

    def __init__(self, optimizer: Optimizer, *, noise_multiplier: float, alpha: float,
                 expected_batch_size: int | None, loss_reduction: str = "mean", generator=None,
                 secure_mode: bool = False, **kwargs):
        # max_grad_norm is Opacus's fixed bound; this optimizer never reads it.
        super().__init__(optimizer, noise_multiplier=noise_multiplier, max_grad_norm=0.0,
                         expected_batch_size=expected_batch_size, loss_reduction=loss_reduction,
                         generator=generator, secure_mode=secure_mode, **kwargs)
        self.alpha = float(alpha)
        self.pending_sensitivity: float | None = None
        self.sensitivities: list[float] = []

    def clip_and_accumulate(self) -> None:
        """Clips per-sample gradients layer by layer (Eqs. 9-10) and sums them into ``p.summed_grad``."""
        grad_samples = self.grad_samples
        norms = layer_norms(grad_samples)
        thresholds = median_threshold(norms)
        factors = clip_per_layer(norms, thresholds)
        for j, (p, g) in enumerate(zip(self.params, grad_samples)):
            _check_processed_flag(p.grad_sample)
            grad = torch.einsum("i,i...", factors[:, j].to(device=g.device, dtype=p.dtype), g.to(p.dtype))
            p.summed_grad = grad if p.summed_grad is None else p.summed_grad + grad
            _mark_as_processed(p.grad_sample)
        scale = sensitivity(thresholds, self.alpha)
        self.pending_sensitivity = scale if self.pending_sensitivity is None else max(self.pending_sensitivity, scale)

    def add_noise(self) -> None:
        """Adds one Gaussian draw of std σ · max_u Z̄_u (Eqs. 12-13) and writes ``p.grad``."""
        scale = self.alpha if self.pending_sensitivity is None else self.pending_sensitivity
        for p in self.params:
            _check_processed_flag(p.summed_grad)
            noise = _generate_noise(std=self.noise_multiplier * scale, reference=p.summed_grad,
                                    generator=self.generator, secure_mode=self.secure_mode)
            p.grad = (p.summed_grad + noise).view_as(p)
            _mark_as_processed(p.summed_grad)
        self.sensitivities.append(scale)
        self.pending_sensitivity = None
