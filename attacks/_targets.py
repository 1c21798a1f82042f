"""Which identities a face adversary targets, and which it trains on: one split, or folds over all of them.

By default the targets are the evaluated split's identities (``test``; ``val`` when tuning),
each divided into enrolment and probe images, and the adversary trains on its own split
(``train``), whose identities are disjoint from them. On a small dataset that leaves few
targets (a folder of 40 people has 8 test people, 40 probes: top-1 moves in steps of 0.025),
so when fewer than ``fold_below`` identities could be targeted and ``folds`` > 1, the
identities of every split the cell may read (all of them for ``test``; all but ``test``
when tuning on ``val``) are pooled and dealt into ``folds`` groups. Each group is the
target set of one fold, whose adversary trains on the other groups' identities (always
disjoint from its targets); the folds' probes are pooled, so every identity with enough
images is a target exactly once. The deal and the enrolment/probe division depend only on
the seed and the settings, so every face adversary of a cell attacks the same probes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence

import numpy as np
import torch

from bench.core.groups import attack_groups, demographic_groups
from bench.core.interfaces import Release, RunContext
from bench.core.keys import content_key
from bench.data.base import ImageSet, Splits
from bench.errors import BenchError
from bench.randomness.seeding import make_generator
from bench.release.facecrops import CropOrigin, FaceCrops

__all__ = ["Fold", "Targets", "find_folds", "find_targets", "pooled_targets"]


class TargetSettings(Protocol):
    """The settings :func:`find_targets` and :func:`find_folds` read (face_reid's and the pretrained pipeline's)."""

    train_split: str
    enrol_per_id: int
    max_ids: int | None
    folds: int
    fold_below: int


@dataclass(frozen=True)
class Targets:
    """The target identities of an attack: their clean images and its enrolment/probe division.

    Attributes:
        split: Name of the evaluated split (folds: the pooled splits joined by ``+``).
        images: Its clean images (folds: the pooled splits' images, in ``splits`` order).
        enrol: Indices of the enrolment images.
        probe: Indices of the probe images.
        splits: The splits ``images`` concatenates (empty: ``split`` alone).
        pooled_chance: Over several folds, the probe-weighted mean of each fold's chance
            rate (None: ``1 / identities``).
        folds: How many folds the probes were pooled from.
    """

    split: str
    images: ImageSet
    enrol: torch.Tensor
    probe: torch.Tensor
    splits: tuple[str, ...] = ()
    pooled_chance: float | None = None
    folds: int = 1

    @property
    def identities(self) -> int:
        """Enrolled identities (1 / identities is chance)."""
        return int(torch.unique(self.images.labels[self.enrol]).numel())

    @property
    def chance(self) -> float:
        """Top-1 accuracy of a guess that ignores the probe."""
        return self.pooled_chance if self.pooled_chance is not None else 1.0 / self.identities

    def enrol_set(self) -> ImageSet:
        """Returns the clean enrolment images (with their labels and boxes)."""
        return self.images.subset(self.enrol)

    def probe_labels(self) -> np.ndarray:
        """Returns the identity of each probe."""
        return self.images.labels[self.probe].numpy()

    def released_images(self, released: Release) -> torch.Tensor:
        """Returns the released images, index for index with ``images``."""
        if not self.splits:
            return released.splits[self.split].images
        return torch.cat([released.splits[name].images for name in self.splits])

    def released_probes(self, released: Release) -> torch.Tensor:
        """Returns the released probe images."""
        return self.released_images(released)[self.probe]

    def counts(self) -> dict[str, float]:
        """Returns the identity, probe and fold counts, as metrics."""
        return {"identities": float(self.identities), "probes": float(len(self.probe)), "folds": float(self.folds)}

    def groups(self, hits: np.ndarray, clean_hits: np.ndarray) -> dict[str, Any]:
        """Returns the attack's top-1 per demographic group of the probes (:func:`bench.core.groups.attack_groups`)."""
        attrs = {name: codes[self.probe] for name, codes in self.images.attrs.items()}
        groups = demographic_groups(attrs, self.images.attr_names)
        return attack_groups(hits, clean_hits, self.chance, groups, "top1") if groups else {}


@dataclass(frozen=True)
class Fold:
    """One fold of a face adversary: its targets and the adversary's own (training) images.

    Attributes:
        targets: The fold's target identities.
        own: The adversary's own clean images: identities disjoint from the targets.
        key: Content key of ``own``'s identities ("" without folds: the ``train_split``,
            so models cached before folds existed are found again).
        index: The fold's number (0 without folds).
        count: How many folds the attack runs (1 without folds).
    """

    targets: Targets
    own: ImageSet
    key: str = ""
    index: int = 0
    count: int = 1

    @property
    def suffix(self) -> str:
        """Appended to the purpose of a random stream drawn in this fold ("" without folds)."""
        return f"/fold{self.index}of{self.count}" if self.count > 1 else ""


def find_targets(clean: Splits, cfg: TargetSettings, ctx: RunContext, owner: str) -> Targets:
    """Returns the evaluated split's identities, each divided into enrolment and probe images.

    The division depends only on the run's seed, so every face adversary of a cell attacks
    the same probes.

    Raises:
        BenchError: The evaluated split shares identities with the adversary's own split,
            or no target identity has more images than ``enrol_per_id``.
    """
    split = ctx.eval_split
    target, own = clean[split], clean[cfg.train_split]
    shared = np.intersect1d(target.labels.numpy(), own.labels.numpy())
    if split == cfg.train_split or len(shared):
        raise BenchError(f"{owner}: the adversary's identities ({cfg.train_split}) overlap the evaluated split "
                         f"{split!r} ({len(shared)} shared); use a split with disjoint identities")
    g = make_generator(ctx.seed, "face_reid", "enrolment")
    ids = torch.unique(target.labels)
    if cfg.max_ids is not None and len(ids) > cfg.max_ids:
        ids = ids[torch.randperm(len(ids), generator=g)[: cfg.max_ids]].sort().values
    enrol, probe = _divide(target.labels, ids, cfg.enrol_per_id, g)
    if not enrol:
        raise BenchError(f"{owner}: no identity of split {split!r} has more than {cfg.enrol_per_id} images")
    return Targets(split, target, torch.cat(enrol), torch.cat(probe))


def _divide(labels: torch.Tensor, ids: torch.Tensor, enrol_per_id: int,
            g: torch.Generator) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Returns per identity with more than ``enrol_per_id`` images its enrolment and probe indices."""
    enrol, probe = [], []
    for identity in ids.tolist():
        members = (labels == identity).nonzero().flatten()
        members = members[torch.randperm(len(members), generator=g)]
        if len(members) <= enrol_per_id:
            continue
        enrol.append(members[:enrol_per_id])
        probe.append(members[enrol_per_id:])
    return enrol, probe


def folding(eligible: int, cfg: TargetSettings) -> bool:
    """Whether an attack with ``eligible`` possible target identities in its split runs in folds.

    It does when ``folds`` > 1 and fewer than ``fold_below`` identities have more than
    ``enrol_per_id`` images, unless ``max_ids`` (a cap the user set) is what keeps them few.
    """
    capped = cfg.max_ids is not None and eligible > cfg.max_ids
    return cfg.folds > 1 and eligible < cfg.fold_below and not capped


def find_folds(clean: Splits, cfg: TargetSettings, ctx: RunContext, owner: str) -> list[Fold]:
    """Returns the folds of a face adversary: one (the evaluated split) or ``folds`` over the pooled identities.

    Raises:
        BenchError: As :func:`find_targets`.
    """
    targets = find_targets(clean, cfg, ctx, owner)
    labels = clean[ctx.eval_split].labels
    eligible = int((torch.unique(labels, return_counts=True)[1] > cfg.enrol_per_id).sum())
    if not folding(eligible, cfg):
        return [Fold(targets, clean[cfg.train_split])]
    names = tuple(name for name in clean.sets if ctx.eval_split == "test" or name != "test")
    pool = concat_sets([clean[name] for name in names])
    ids, counts = torch.unique(pool.labels, return_counts=True)
    candidates = ids[counts > cfg.enrol_per_id]
    count = min(cfg.folds, len(candidates) // 2)
    if count < 2:
        return [Fold(targets, clean[cfg.train_split])]
    g = make_generator(ctx.seed, "face_reid", "enrolment")
    enrol, probe = _divide(pool.labels, candidates, cfg.enrol_per_id, g)
    order = torch.randperm(len(candidates), generator=make_generator(ctx.seed, "face_reid", "folds", count))
    folds = []
    for index, group in enumerate(torch.tensor_split(order, count)):
        chosen = set(group.tolist())
        fold_targets = Targets("+".join(names), pool, torch.cat([enrol[i] for i in sorted(chosen)]),
                               torch.cat([probe[i] for i in sorted(chosen)]), names)
        mine = torch.isin(pool.labels, candidates[group])
        own = pool.subset(~mine)
        key = content_key("fold", names, sorted(torch.unique(own.labels).tolist()))
        folds.append(Fold(fold_targets, own, key, index, count))
    return folds


def pooled_targets(folds: Sequence[Fold]) -> Targets:
    """Returns the targets of all folds as one set (probes in fold order; chance probe-weighted)."""
    if len(folds) == 1:
        return folds[0].targets
    first = folds[0].targets
    probes = sum(len(f.targets.probe) for f in folds)
    chance = sum(len(f.targets.probe) * f.targets.chance for f in folds) / probes
    return Targets(first.split, first.images, torch.cat([f.targets.enrol for f in folds]),
                   torch.cat([f.targets.probe for f in folds]), first.splits, chance, len(folds))


def concat_sets(sets: Sequence[ImageSet]) -> ImageSet:
    """Returns image sets as one (attributes every set has; boxes where every set has them)."""
    if len(sets) == 1:
        return sets[0]
    attrs = [a for a in sets[0].attrs if all(a in s.attrs for s in sets)]
    boxes = None if any(s.boxes is None for s in sets) else [b for s in sets for b in s.boxes]
    fields = dict(images=torch.cat([s.images for s in sets]), labels=torch.cat([s.labels for s in sets]),
                  attrs={a: torch.cat([s.attrs[a] for s in sets]) for a in attrs},
                  attr_names={a: sets[0].attr_names[a] for a in attrs if a in sets[0].attr_names}, boxes=boxes)
    origins = [getattr(s, "origin", None) for s in sets]
    if all(o is not None for o in origins):  # face crops of scenes stay crops that know their scenes
        return FaceCrops(**fields, origin=CropOrigin.concat(origins))
    return ImageSet(**fields)

