"""Any class-per-folder tree split by *image*: classification data of your own.

The ``folder`` dataset splits classes (people) disjointly, as few-shot identification
needs. A classifier (dp_vit) needs the same classes everywhere, so ``folder_images``
reads the same tree (``ROOT/<label>/<image>``, the same annotations and image handling)
and splits every class's images, by a seeded permutation per class, into ``train`` (the
model's training records), ``val``, ``test`` and ``population`` (data the membership
adversary trains its reference models on, disjoint from every training record), in the
proportions of ``image_fractions``.

Images are stored as ``folder`` stores them: at their own (smallest common) size, so the
mechanism runs on the user's pixels; the DP ViT resizes them to its input after the release
(``task.model.image_size``), and a ``size`` the user sets is the most they are stored at.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

import torch

from bench.core.registry import register_dataset
from bench.data import imageread
from bench.data.base import DataShape, ImageSet, Splits, SplitShape
from bench.data.classsplit import CLASS_SPLIT_ONLY, COMMON_DEFAULTS, parse_options
from bench.data.imagesplit import allocate
from bench.data.loaders.folder import Folder, FolderIndex
from bench.errors import BenchError
from bench.randomness.seeding import make_generator

SPLITS = ("train", "val", "test", "population")
DEFAULTS: dict[str, Any] = {
    "root": None, **{k: v for k, v in COMMON_DEFAULTS.items() if k not in ("split_fractions", *CLASS_SPLIT_ONLY)},
    "min_images": 4, "image_fractions": (0.4, 0.1, 0.2, 0.3),
}


def parse_fractions(value: Any) -> tuple[float, ...]:
    """Reads ``image_fractions``: four fractions (train, val, test, population) >= 0 summing to 1, train > 0.

    Raises:
        BenchError: Anything else.
    """
    try:
        parts = tuple(float(v) for v in (value.split(",") if isinstance(value, str) else value))
    except (TypeError, ValueError):
        parts = ()
    if len(parts) != 4 or min(parts) < 0 or parts[0] <= 0 or not math.isclose(sum(parts), 1.0, abs_tol=1e-6):
        raise BenchError(f"folder_images: option image_fractions expects four fractions (train, val, test, "
                         f"population) >= 0 summing to 1 with train > 0, got {value!r}")
    return parts


@register_dataset("folder_images")
class FolderImages(Folder):
    """Your own images, one folder per class, split by image (stratified) into train / val / test / population.

    Options:
        root: The tree (required).
        size: Most stored side, or [height, width] (default: none, the images' own
            smallest common size; smaller images are never upscaled).
        min_images: Classes with fewer images are left out (default 4: one per split).
        image_fractions: Train / val / test / population fractions of each class's images
            (default 0.4, 0.1, 0.2, 0.3).
        seed: Seed of the per-class permutations (default 0).
        max_classes: Use at most this many classes, the first in sorted order (default: all).
        per_class: Use at most this many images of each class, a seeded choice (default: all).
        grey: Store one grey channel instead of RGB (default: when every image has one
            channel; true or false overrides).
    """

    layout = ("ROOT/<class>/<image> (any format PIL reads; set ROOT with --set task.data.root=DIR), optional "
              "ROOT/attributes.csv and ROOT/boxes.csv as for 'folder'")
    description = "any class-per-folder tree of images, split by image (same classes in every split)"

    def inspect(self, root: Path | None, options: Mapping[str, Any]) -> DataShape:
        """Lists the tree and reads the images' headers (no pixels); returns the splits' shapes and stored size."""
        index = self._index(root, options)
        sel = self._selection(index)
        stored = self._storage(index, sel).size
        return {s: replace(SplitShape.of_labels([lab for lab, sp in zip(sel.labels, sel.split_of) if sp == s]),
                           stored=stored) for s in SPLITS}

    def load(self, root: Path | None, options: Mapping[str, Any], cache_dir: Path) -> Splits:
        """Decodes the selected images into the cache once (or reads them from it).

        Raises:
            BenchError: A missing or empty tree, bad options or annotations, or an image
                that cannot be read (naming it).
        """
        index = self._index(root, options)
        sel = self._selection(index)
        sets, content, built = self._decode(index, sel, cache_dir, "images")
        classes = index.groups["train"]
        info = {
            "source": str(index.base), "classes": list(classes),
            "options": {k: (list(v) if isinstance(v, tuple) else v) for k, v in index.opts.items()},
            "n_images": {s: len(sets[s]) for s in SPLITS},
            "left_out": {"classes": len(index.classes) - len(classes),
                         "why": f"fewer than min_images={index.opts['min_images']} images"},
            "skipped": {"files": len(index.skipped), "examples": index.skipped[:5]},
            **built,
        }
        imageread.warn_about(self.name, info)
        return Splits(self.name, sets, content, synthetic=False, info=info)

    def load_public(self, root: Path | None, options: Mapping[str, Any], cache_dir: Path) -> ImageSet | None:
        """None: every image of the tree is in a split."""
        return None

    def _selection(self, index: FolderIndex) -> imageread.Selection:
        sel = index.selection()
        by_class: dict[int, list[int]] = {}
        for i, label in enumerate(sel.labels):
            by_class.setdefault(label, []).append(i)
        split_of = [""] * len(sel.names)
        for label, members in sorted(by_class.items()):
            g = make_generator(index.opts["seed"], self.name, "images", sel.names[members[0]].split("/", 1)[0])
            order = [members[j] for j in torch.randperm(len(members), generator=g).tolist()]
            start = 0
            for split, n in zip(SPLITS, allocate(len(order), index.opts["image_fractions"])):
                for i in order[start:start + n]:
                    split_of[i] = split
                start += n
        sel.splits, sel.split_of = SPLITS, split_of
        classes = sorted(by_class)
        sel.labels = [classes.index(lab) for lab in sel.labels]  # labels 0..K-1 over the kept classes
        return sel

    def _index(self, root: Path | None, options: Mapping[str, Any]) -> FolderIndex:
        opts = parse_options(self.name, options, DEFAULTS)
        opts["image_fractions"] = parse_fractions(opts["image_fractions"])
        index = self._read_tree(root, opts)
        kept = sorted(c for c, files in index.classes.items() if len(files) >= opts["min_images"])[: opts["max_classes"]]
        if len(kept) < 2:
            raise BenchError(f"folder_images: {len(kept)} class(es) under {index.base} have at least "
                             f"min_images={opts['min_images']} images; a classifier needs 2 (lower it with "
                             "--set task.data.min_images=N, or add images)")
        index.groups = {"train": kept}
        return index
