"""The membership adversary's one-run audit of DP-SGD training (Steinke, Nasr & Jagielski 2023).

``canaries`` images of the population split, each given a wrong label (a seeded random
other class, so that a model that trains on one must memorise it), are each included in
the training set by a seeded fair coin; one model is trained by the cell's method (last
epoch; the canaries count as training records in its accounting) on the release's train
split plus the included canaries, the canaries are scored by minus their loss, and
:func:`bench.privacy.mia.one_run.one_run_audit` turns the ranked scores into an epsilon lower bound
with its ceiling (the bound a perfect guesser would reach on the same coins).

The same audit runs on the non-private model (clean train split plus the same canaries):
its bound shows how close the audit can come to its ceiling when nothing protects the
canaries. A private bound far below the claim means little when that one is also far
below its ceiling.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from bench.core.interfaces import Release, RunContext
from bench.data.base import ImageSet, Splits
from bench.privacy.mia.one_run import one_run_audit
from bench.randomness.seeding import make_generator
from bench.storage.cache import warn


def canary_set(population: ImageSet, count: int, classes: int, seed: int) -> tuple[ImageSet, np.ndarray]:
    """Returns ``count`` mislabelled canaries drawn from ``population`` and their inclusion coins.

    Args:
        population: Images the canaries are drawn from (never training records).
        count: Canaries.
        classes: Number of classes (at least 2).
        seed: The run's seed (the draw, the wrong labels and the coins derive from it).
    """
    pick = torch.randperm(len(population), generator=make_generator(seed, "membership", "canaries"))[:count]
    chosen = population.subset(pick.sort().values)
    shift = torch.randint(1, classes, (len(chosen),), generator=make_generator(seed, "membership", "canary labels"))
    coins = torch.rand(len(chosen), generator=make_generator(seed, "membership", "canary coins")) < 0.5
    labels = (chosen.labels.long() + shift) % classes
    return ImageSet(images=chosen.images, labels=labels), coins.numpy()


def audit_metrics(task: Any, clean: Splits, released: Release, private: bool, classes: int, delta: float,
                  cfg: Any, ctx: RunContext) -> dict[str, float]:
    """Returns the one-run audit's metrics (``audit.*``) of the cell's training, and of the non-private one.

    The cell's own audit runs only for a DP-SGD claim (``private``); the non-private
    audit always runs, as the measure of the audit's strength (``audit.*_clean``).

    Args:
        task: The cell's task (``reference_classifiers`` trains the audited models).
        clean: The clean splits.
        released: The release.
        private: The cell's training carries a DP-SGD claim.
        classes: Number of classes.
        delta: The claim's delta (the bound is stated at it).
        cfg: The adversary's settings (``canaries``, ``confidence``).
        ctx: The run.
    """
    count = min(cfg.canaries, len(clean["population"]))
    if count < cfg.canaries:
        warn(f"attack 'membership': {cfg.canaries} canaries asked, the population split has {count}; "
             f"reduced to {count}")
    out = {"audit.canaries_requested": float(cfg.canaries)}
    if count < 2:
        warn(f"attack 'membership': {count} canaries cannot be audited (at least 2); no one-run audit")
        return out
    runs = [("_clean", clean, clean.fingerprint, False)]
    if private:
        runs.insert(0, ("", released.splits, released.key, True))
    for suffix, data, key, dp in runs:
        canaries, coins = canary_set(data["population"], count, classes, ctx.seed)
        train = data["train"]
        union = ImageSet(images=torch.cat([train.images[:], canaries.images]),
                         labels=torch.cat([train.labels.long(), canaries.labels]))
        index = torch.cat([torch.arange(len(train)), len(train) + torch.from_numpy(np.flatnonzero(coins))])
        ctx.log(f"membership: one-run audit, {int(coins.sum())} of {count} canaries included "
                f"({'the cell' if dp else 'non-private'})")
        model = task.reference_classifiers(union, f"{key}|canaries|{count}", dp, [index], classes, ctx)[0]
        scores = -model.losses(canaries.images, canaries.labels).cpu().numpy()
        got = one_run_audit(scores, coins, delta, beta=1.0 - cfg.confidence)
        out.update({f"audit.{k}{suffix}": v for k, v in got.items()})
    return out
