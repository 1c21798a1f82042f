"""Episodic sampling and prototypical-network maths (Snell et al. 2017), vectorised."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


class EpisodeSampler:
    """Samples N-way (K+Q)-shot episodes from labelled images.

    Args:
        labels: int64 tensor [M] of class labels.
        way: Classes per episode.
        per_class: Images per class per episode (support + query).
        generator: CPU generator the draws come from.

    Raises:
        ValueError: Fewer than ``way`` classes have ``per_class`` images.
    """

    def __init__(self, labels: torch.Tensor, way: int, per_class: int, generator: torch.Generator):
        classes, counts = torch.unique(labels, return_counts=True)
        keep = counts >= per_class
        classes, counts = classes[keep], counts[keep]
        if len(classes) < way:
            raise ValueError(f"only {len(classes)} classes have {per_class} images; {way}-way episodes need {way}")
        order = torch.argsort(labels, stable=True)
        sorted_labels = labels[order]
        starts = torch.searchsorted(sorted_labels, classes)
        slots = torch.arange(int(counts.max()))
        positions = (starts[:, None] + slots[None, :]).clamp(max=len(labels) - 1)
        self.table = order[positions]
        self.counts = counts
        self.way, self.per_class, self.generator = way, per_class, generator

    @property
    def num_classes(self) -> int:
        """Classes eligible for episodes."""
        return len(self.counts)

    def sample(self, episodes: int) -> torch.Tensor:
        """Returns image indices [episodes, way, per_class]."""
        g = self.generator
        chosen = torch.rand(episodes, self.num_classes, generator=g).argsort(dim=1)[:, : self.way]
        scores = torch.rand(episodes, self.way, self.table.shape[1], generator=g)
        valid = torch.arange(self.table.shape[1]) < self.counts[chosen][..., None]
        scores = scores.masked_fill(~valid, 2.0)
        picks = scores.argsort(dim=2)[..., : self.per_class]
        return self.table[chosen[..., None], picks]


def prototype_logits(embeddings: torch.Tensor, shot: int) -> torch.Tensor:
    """Returns logits of query images against class prototypes.

    Args:
        embeddings: [..., way, shot + query, D]; the first ``shot`` of each class are support.
        shot: Support images per class.

    Returns:
        [..., way * query, way]: negative squared Euclidean distances to the prototypes.
    """
    support, query = embeddings[..., :shot, :], embeddings[..., shot:, :]
    prototypes = support.mean(dim=-2)
    flat_query = query.reshape(*query.shape[:-3], -1, query.shape[-1])
    return -torch.cdist(flat_query, prototypes).pow(2)


def query_targets(way: int, query: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Returns the class index of each query row of :func:`prototype_logits`."""
    return torch.arange(way, device=device).repeat_interleave(query)


def prototypical_loss(embeddings: torch.Tensor, shot: int) -> torch.Tensor:
    """Cross-entropy of the prototypical classifier on one episode [way, shot + query, D]."""
    way, per_class = embeddings.shape[:2]
    logits = prototype_logits(embeddings, shot)
    return F.cross_entropy(logits, query_targets(way, per_class - shot, embeddings.device))


@torch.no_grad()
def episode_accuracies(embeddings: torch.Tensor, index: torch.Tensor, shot: int, chunk: int = 100) -> torch.Tensor:
    """Accuracy of each episode, computed on precomputed embeddings.

    Args:
        embeddings: [M, D] embeddings of all candidate images.
        index: [E, way, shot + query] image indices from :meth:`EpisodeSampler.sample`.
        shot: Support images per class.
        chunk: Episodes per vectorised step.

    Returns:
        float tensor [E].
    """
    way, per_class = index.shape[1:]
    targets = query_targets(way, per_class - shot, embeddings.device)
    out = []
    for start in range(0, len(index), chunk):
        batch = embeddings[index[start : start + chunk].to(embeddings.device)]
        predicted = prototype_logits(batch, shot).argmax(dim=-1)
        out.append((predicted == targets).float().mean(dim=-1))
    return torch.cat(out).cpu()


def mean_ci95(values: torch.Tensor) -> tuple[float, float]:
    """Returns the mean and the half-width of its normal 95% confidence interval."""
    n = values.numel()
    mean = float(values.mean())
    if n < 2:
        return mean, float("nan")
    return mean, 1.96 * float(values.std(unbiased=True)) / math.sqrt(n)
