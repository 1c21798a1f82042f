"""Episodic sampling and prototypical-network maths (Snell et al. 2017), vectorised."""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
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


def group_episode_accuracies(
    embeddings: dict[str, torch.Tensor],
    labels: torch.Tensor,
    groups: dict[str, dict[str, np.ndarray]],
    episode: tuple[int, int, int],
    episodes: int,
    generator: Callable[[str, str], torch.Generator],
    min_size: int,
) -> dict[str, dict[str, dict[str, Any]]]:
    """Few-shot accuracy per demographic group, from episodes drawn *within* each group.

    Every image of an episode (support and query, all ``way`` classes) belongs to the
    group, so a group's number is how well the model tells that group's people apart: not
    a slice of mixed episodes, whose difficulty would depend on the other groups.

    Args:
        embeddings: Metric name -> [M, D] embeddings of the split's images (``acc`` on
            released images, ``acc_clean`` by the clean model on clean images, say).
        labels: [M] class (identity) of each image.
        groups: From :func:`bench.core.groups.demographic_groups`.
        episode: (way, shot + query, shot).
        episodes: Episodes per group.
        generator: (attribute, value) -> the generator of that group's episodes.
        min_size: Fewest images a group needs for a number.

    Returns:
        ``attribute -> group -> {n, classes, episodes, <metric>, <metric>_ci95}``; a group
        below ``min_size`` images or with fewer than ``way`` classes of ``shot + query``
        images has only its sizes and ``flag``.
    """
    way, per_class, shot = episode
    table: dict[str, dict[str, dict[str, Any]]] = {}
    for attr, members in groups.items():
        for value, mask in members.items():
            where = torch.from_numpy(np.flatnonzero(mask))
            sub = labels[where]
            _, counts = torch.unique(sub, return_counts=True)
            row: dict[str, Any] = {"n": len(where), "classes": int((counts >= per_class).sum())}
            if row["n"] < min_size or row["classes"] < way:
                row["flag"] = "group too small"
            else:
                index = where[EpisodeSampler(sub, way, per_class, generator(attr, value)).sample(episodes)]
                row["episodes"] = episodes
                for name, emb in embeddings.items():
                    row[name], row[f"{name}_ci95"] = mean_ci95(episode_accuracies(emb, index, shot))
            table.setdefault(attr, {})[value] = row
    return table
