"""Classification metrics as pure functions: top-k, per-class accuracy and AP, drop against a covariate.

Shared by the classification tasks (``dp_vit``, ``classify``, ``transfer``); nothing here
trains or reads data.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import torch

from bench.data.base import Splits


def class_count(clean: Splits) -> int:
    """Returns the number of classes: the dataset's class names, else the largest label + 1 over the splits."""
    names = clean.info.get("classes")
    if names:
        return len(names)
    return max(int(s.labels.max()) + 1 for s in clean.sets.values() if len(s))


def topk_accuracy(probs: torch.Tensor, labels: torch.Tensor, k: int = 5) -> tuple[float, float]:
    """Returns (top-1, top-k) accuracy of class scores [N, C] against labels [N]."""
    if len(labels) == 0:
        return math.nan, math.nan
    labels = labels.to(probs.device)
    top = probs.topk(min(k, probs.shape[1]), dim=1).indices
    top1 = (top[:, 0] == labels).float().mean().item()
    topk = (top == labels[:, None]).any(dim=1).float().mean().item()
    return float(top1), float(topk)


def proportion_ci95(p: float, n: int) -> float:
    """Returns the half-width of the normal-approximation 95% interval of a proportion over ``n`` trials."""
    return 1.96 * math.sqrt(max(p * (1 - p), 1e-12) / n) if n else math.nan


def per_class_accuracy(scores: torch.Tensor, labels: torch.Tensor, classes: int, k: int = 1) -> torch.Tensor:
    """Returns float64 [classes]: top-k accuracy of each class's images (NaN for a class without images)."""
    labels = labels.to(scores.device)
    hit = (scores.topk(min(k, scores.shape[1]), dim=1).indices == labels[:, None]).any(dim=1).double()
    total = torch.zeros(classes, dtype=torch.float64, device=scores.device).index_add_(0, labels, hit)
    count = torch.bincount(labels, minlength=classes).double()
    return (total / count).where(count > 0, torch.tensor(math.nan, dtype=torch.float64, device=scores.device)).cpu()


def per_class_ap(scores: torch.Tensor, labels: torch.Tensor, classes: int | None = None) -> torch.Tensor:
    """Returns float64 [C]: average precision of each class's score column (one-vs-rest).

    AP is the mean, over the class's positives, of the precision among images scored at
    least as high (scikit-learn's ``average_precision_score``; ties are ranked in image
    order, which matters only for exactly equal scores). ``labels`` is [N] class indices,
    or [N, C] 0/1 targets (multi-label). NaN for a class without positives.
    """
    n, c = scores.shape
    if labels.dim() == 1:
        targets = torch.zeros(n, classes or c, dtype=torch.float64, device=scores.device)
        targets[torch.arange(n, device=scores.device), labels.to(scores.device)] = 1.0
    else:
        targets = labels.to(device=scores.device, dtype=torch.float64)
    order = scores.double().argsort(dim=0, descending=True, stable=True)
    hits = targets.gather(0, order)
    precision = hits.cumsum(0) / torch.arange(1, n + 1, device=scores.device, dtype=torch.float64)[:, None]
    positives = hits.sum(0)
    ap = (precision * hits).sum(0) / positives
    return ap.where(positives > 0, torch.tensor(math.nan, dtype=torch.float64, device=scores.device)).cpu()


def nanmean(values: torch.Tensor) -> float:
    """Returns the mean of the defined values (NaN when none is)."""
    kept = values[~torch.isnan(values)]
    return float(kept.mean()) if len(kept) else math.nan


def correlation(x: Sequence[float] | torch.Tensor, y: Sequence[float] | torch.Tensor) -> dict[str, Any]:
    """Returns Pearson's r of two series over the entries where both are defined, with its p-value.

    Returns:
        ``{"r", "p", "n"}``; r and p are NaN with fewer than 3 pairs or a constant series
        (no correlation is defined there).
    """
    x = torch.as_tensor(x, dtype=torch.float64).flatten()
    y = torch.as_tensor(y, dtype=torch.float64).flatten()
    keep = ~(torch.isnan(x) | torch.isnan(y))
    x, y = x[keep], y[keep]
    n = int(len(x))
    if n < 3 or float(x.std()) == 0.0 or float(y.std()) == 0.0:
        return {"r": math.nan, "p": math.nan, "n": n}
    from scipy.stats import pearsonr

    r, p = pearsonr(x.numpy(), y.numpy())
    return {"r": float(r), "p": float(p), "n": n}


def bootstrap_mean_interval(deltas: torch.Tensor, generator: torch.Generator,
                            resamples: int = 1000) -> tuple[float, float]:
    """Returns the 2.5 and 97.5 percentiles of the mean of per-image differences over resampled images.

    ``deltas`` pairs two measurements of the same test images (a hit of one model minus a
    hit of the other), so the interval of their mean difference is a paired one.
    """
    deltas = deltas.double().flatten()
    if len(deltas) == 0:
        return math.nan, math.nan
    index = torch.randint(0, len(deltas), (resamples, len(deltas)), generator=generator)
    return _percentiles(deltas[index].mean(1))


def bootstrap_interval(statistic: Callable[[torch.Tensor], float], n: int, generator: torch.Generator,
                       resamples: int = 200) -> tuple[float, float]:
    """Returns the 2.5 and 97.5 percentiles of ``statistic(index)`` over ``resamples`` resampled index sets of ``n``."""
    values = [statistic(torch.randint(0, n, (n,), generator=generator)) for _ in range(resamples)]
    return _percentiles(torch.tensor(values, dtype=torch.float64))


def _percentiles(values: torch.Tensor) -> tuple[float, float]:
    values = values[~torch.isnan(values)]
    if len(values) == 0:
        return math.nan, math.nan
    lo, hi = torch.quantile(values, torch.tensor([0.025, 0.975], dtype=torch.float64)).tolist()
    return float(lo), float(hi)


def topk_hits(scores: torch.Tensor, labels: torch.Tensor, k: int) -> torch.Tensor:
    """Returns float64 [N]: 1 where the label is among the ``k`` highest scores of its image."""
    top = scores.topk(min(k, scores.shape[1]), dim=1).indices
    return (top == labels.to(scores.device)[:, None]).any(dim=1).double()
