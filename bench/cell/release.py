"""Step 3 of a cell, the release: its splits passed through the mechanism (:mod:`bench.release.dataset`), cached."""

from __future__ import annotations

from typing import Callable

from bench.cell.plan import Plan
from bench.core.interfaces import Release, RunContext
from bench.core.splits import ImageSet, Splits
from bench.data.base import load_public
from bench.release.dataset import make_release


def release(planned: Plan, clean: Splits, ctx: RunContext, log: Callable[[str], None]) -> Release:
    """Returns the cell's release: the clean splits through its mechanism, on its boxes, fitted on the public set if it fits."""
    cfg = planned.config
    log(f"releasing {planned.task.dataset} through {cfg.mechanism}")
    boxes = cfg.overrides.get("release", {}).get("boxes", "dataset")

    def public() -> ImageSet | None:
        return load_public(planned.task.dataset, cfg.data_root, planned.task.data_options(), cfg.cache)

    return make_release(clean, planned.mechanism, ctx, public, boxes)
