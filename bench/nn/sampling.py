"""PK sampling: batches of P identities with K images each, for batch-hard metric losses."""

from __future__ import annotations

from typing import Iterator

import torch


class PKSampler:
    """Draws epochs of P x K batches (the ``RandomIdentitySampler`` of reID codebases).

    At every epoch each identity's images are shuffled and cut into groups of K (an
    identity with fewer than K images, or a last group that is short, is completed by
    drawing again from its images). Batches then take one group from each of P distinct
    identities, chosen at random among those with groups left, until fewer than P remain.
    Every image is seen about once per epoch; all draws come from ``generator``.

    Args:
        labels: Identity of each image [N].
        p: Identities per batch.
        k: Images per identity.
        generator: Source of every random draw.

    Raises:
        ValueError: ``p`` or ``k`` below 1, or fewer than ``p`` identities.
    """

    def __init__(self, labels: torch.Tensor, p: int, k: int, generator: torch.Generator):
        if p < 1 or k < 1:
            raise ValueError(f"P and K must be >= 1, got P={p}, K={k}")
        labels = torch.as_tensor(labels).cpu()
        ids, inverse = torch.unique(labels, return_inverse=True)
        if len(ids) < p:
            raise ValueError(f"PK sampling needs at least P={p} identities, got {len(ids)}")
        order = torch.argsort(inverse, stable=True)
        counts = torch.bincount(inverse, minlength=len(ids)).tolist()
        self.members = list(torch.split(order, counts))
        self.p, self.k, self.generator = p, k, generator

    def __len__(self) -> int:
        """An upper bound on the batches of one epoch."""
        groups = sum(-(-max(len(m), self.k) // self.k) for m in self.members)
        return groups // self.p

    def epoch(self) -> Iterator[torch.Tensor]:
        """Yields the batches of one epoch: index tensors of shape [P * K], identity-major."""
        g = self.generator
        groups: list[list[torch.Tensor]] = []
        for members in self.members:
            shuffled = members[torch.randperm(len(members), generator=g)]
            short = -len(shuffled) % self.k
            if short:
                extra = members[torch.randint(len(members), (short,), generator=g)]
                shuffled = torch.cat([shuffled, extra])
            groups.append(list(torch.split(shuffled, self.k)))
        while True:
            open_ids = [i for i, left in enumerate(groups) if left]
            if len(open_ids) < self.p:
                return
            chosen = torch.randperm(len(open_ids), generator=g)[: self.p].tolist()
            yield torch.cat([groups[open_ids[c]].pop() for c in chosen])
