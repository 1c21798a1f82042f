"""Step 2 of a cell, its data: the dataset loaded (or generated, or read from the cache), and the sizes its images pass through."""

from __future__ import annotations

import sys
from typing import Any, Callable

from bench.cell.plan import Plan
from bench.core.interfaces import Task
from bench.core.registry import datasets as dataset_registry
from bench.core.splits import Splits
from bench.data.base import load_dataset
from bench.data.shards import configure_huggingface
from bench.data.stored_size import upscaling_warning


def load(planned: Plan, log: Callable[[str], None]) -> tuple[Splits, dict[str, Any]]:
    """Returns the cell's clean splits and their :func:`image_chain` (a warning on stderr if the loader upscaled)."""
    dataset = dataset_registry.get(planned.task.dataset)()
    log(f"{'generating' if dataset.synthetic else 'loading'} {planned.task.dataset} (or reading it from the cache)")
    clean = cell_data(planned)
    chain = image_chain(clean, planned.task)
    if chain["upscaled"]:
        print(f"bench: warning: {upscaling_warning(chain, planned.task.dataset)}", file=sys.stderr, flush=True)
    return clean, chain


def cell_data(planned: Plan) -> Splits:
    """Loads (or generates, or reads from the cache) the dataset a cell is computed on."""
    cfg = planned.config
    configure_huggingface(cfg.cache)
    return load_dataset(planned.task.dataset, cfg.data_root, planned.task.data_options(), cfg.cache, cfg.verify_data)


def image_chain(clean: Splits, task: Task) -> dict[str, Any]:
    """Returns the sizes images pass through: native (as read), stored (released: where the mechanism runs), task input.

    ``upscaled`` counts images the loader enlarged to the stored size (from the dataset's
    ``info["images"]``, written by :func:`bench.data.base.size_report`).
    """
    first = next(iter(clean.sets.values())).images
    stored = [int(first.shape[-2]), int(first.shape[-1])]
    reported = clean.info.get("images") or {}
    native = reported.get("native") or {"min": stored, "median": stored, "max": stored}
    task_input = task.input_size()
    chain = {"native": native, "stored": stored, "mechanism_at": "stored",
             "release_shape": [int(first.shape[1]), *stored], "channels": int(first.shape[1]),
             "task_input": list(task_input) if task_input else stored, "upscaled": int(reported.get("upscaled", 0))}
    kept = clean.info.get("storage")
    if kept:
        chain["upscaled_examples"] = list(kept.get("upscaled_examples", []))
        if kept.get("target"):  # the user's size option; none: stored at the images' own size
            chain["size_option"] = list(kept["target"])
    return chain
