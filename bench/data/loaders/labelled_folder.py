"""A labelled folder of images for classification: ``ROOT/<class>/<image>`` or ``ROOT/<split>/<class>/<image>``.

The ``folder`` dataset splits classes disjointly (few-shot identification); a classifier
needs the same classes in every split, so ``labelled_folder`` splits by image
(:mod:`bench.data.imagesplit`): a root holding ``train/`` and ``val/`` or ``test/``
folders (``validation``, ``valid``, ``dev``, ``testing`` accepted) is read as its own
split, each a class-per-folder tree; any other root is one class-per-folder tree whose
every class is split by image, stratified and seeded. The rule used is recorded in the
data's ``info["split"]``.

Face boxes for the face-only mechanisms (``face_blur``, ``face_overlay``) come from an
optional ``ROOT/boxes.csv``: ``file,x1,y1,x2,y2`` rows (a header is optional), paths
relative to the root (``dog/001.jpg``, or ``train/dog/001.jpg`` with split folders), in
pixels of the image as displayed; several rows per image for several faces, a row with
only the name for an image without a face, and every selected image listed (an image
left out would keep its face). Without the file, those mechanisms find faces with MTCNN
(the release's ``boxes: dataset`` rule). With boxes, ``info["face_fraction"]`` holds each
image's fraction of pixels inside a face box, the measure the classify task correlates
per-class drops with (the paper's Fig. 3).

Attributes of the images (``gender``, ``age``) come from an optional ``ROOT/attributes.csv``
(``file,<attribute>,...``, paths as in ``boxes.csv``), read and coded as for ``folder``
(:mod:`bench.data.attribute_table`: ``age`` in years is binned into FairFace's age groups);
``attribute_inference`` and the per-group results use them, and an adversary inferring an
attribute no split labels is refused when the cell is planned.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from bench.core.registry import register_dataset
from bench.data import imageread
from bench.data.attribute_table import ATTRIBUTES, labelled_in, read_table, table_codes
from bench.data.base import DataShape, ImageSet, Splits, SplitShape
from bench.data.classsplit import CLASS_SPLIT_ONLY, COMMON_DEFAULTS, parse_options
from bench.data.hftables import SPLIT_WORDS
from bench.data.imagesplit import SPLIT_RULES, SPLITS, ImageSplit, split_images
from bench.data.loaders.folder import BOXES, Folder, FolderIndex, _key, read_boxes, scan_tree
from bench.errors import BenchError

DEFAULTS: dict[str, Any] = {"root": None, **{k: v for k, v in COMMON_DEFAULTS.items() if k not in CLASS_SPLIT_ONLY},
                            "min_images": 3, "split_fractions": (0.7, 0.1, 0.2), "split": "auto"}


@register_dataset("labelled_folder")
class LabelledFolder(Folder):
    """Your own labelled images, a folder per class, split by image (same classes in every split).

    Options:
        root: The tree (required; ``--set task.data.root=DIR``).
        size: Most stored side, or [height, width] (default: none, the images' own smallest
            common size: the mechanism runs at the size they have; the classifier resizes).
        split: ``auto`` (the root's own train / val / test folders where present, else
            by image), ``dataset`` (its folders, or an error) or ``images``.
        split_fractions: Train / val / test fractions of each class's images (default
            0.7, 0.1, 0.2; with own folders only val's share of train is used).
        min_images: Classes with fewer train images are left out (default 3).
        seed: Seed of the per-class permutations (default 0).
        max_classes: Use at most this many classes, the first in sorted order (default: all).
        per_class: Use at most this many images of each class, a seeded choice (default: all).
        grey: Store one grey channel instead of RGB (default false).
    """

    layout = ("ROOT/<class>/<image> or ROOT/train|val|test/<class>/<image> (any format PIL reads; set ROOT with "
              "--set task.data.root=DIR), optional ROOT/boxes.csv (file,x1,y1,x2,y2; paths relative to ROOT) and "
              "ROOT/attributes.csv (file,<attribute>,...)")
    description = "your labelled images, a folder per class (or train/ val/ test/ folders of them), split by image"

    def inspect(self, root: Path | None, options: Mapping[str, Any]) -> DataShape:
        """Lists the tree and reads boxes.csv (no image is opened); returns the splits' shapes with their faces."""
        _, sel, _ = self._select(root, options)
        return labelled_shape(sel)

    def load(self, root: Path | None, options: Mapping[str, Any], cache_dir: Path) -> Splits:
        """Decodes the selected images into the cache once (or reads them from it).

        Raises:
            BenchError: A missing or empty tree, bad options or boxes, too few classes, or an
                image that cannot be read (naming it).
        """
        index, sel, split = self._select(root, options)
        sets, content, built = self._decode(index, sel, cache_dir, "classify")
        info = {
            "source": str(index.base), "classes": [str(c) for c in split.classes], "split": split.how,
            "options": {k: (list(v) if isinstance(v, tuple) else v) for k, v in index.opts.items() if k != "root"},
            "n_images": {s: len(sets[s]) for s in SPLITS},
            "left_out": {"images": split.left_out,
                         "why": f"their class has fewer than min_images={index.opts['min_images']} train images, "
                                "is beyond max_classes, or has no train folder"},
            "skipped": {"files": len(index.skipped), "examples": index.skipped[:5]},
            "annotations": [n for n, a in ((ATTRIBUTES, index.attributes), (BOXES, index.boxes)) if a is not None],
            **built,
        }
        if index.boxes is not None:
            info["face_fraction"] = {s: face_fraction(sets[s]) for s in SPLITS}
        imageread.warn_about(self.name, info)
        return Splits(self.name, sets, content, synthetic=False, info=info)

    def load_public(self, root: Path | None, options: Mapping[str, Any], cache_dir: Path) -> ImageSet | None:
        """None: the folder has no images set apart as public."""
        return None

    def _select(self, root: Path | None, options: Mapping[str, Any]
                ) -> tuple[FolderIndex, imageread.Selection, ImageSplit]:
        """Lists the tree, splits it and reads boxes.csv: the index, the selection to decode and the split."""
        opts = parse_options(self.name, options, DEFAULTS)
        if opts["split"] not in SPLIT_RULES:
            raise BenchError(f"{self.name}: split must be one of {', '.join(SPLIT_RULES)}, got {opts['split']!r}")
        base = self._base(root, opts["root"])
        files, own, keys, skipped = _listing(base, opts["split"] != "images")
        if not files:
            raise BenchError(f"{self.name}: no images in class folders under {base} ({len(skipped)} other file(s)); "
                             f"expected {self.layout}")
        split = split_images(own, keys, opts, self.name)
        chosen = [i for i, s in enumerate(split.split_of) if s]
        sel = imageread.Selection(SPLITS, [files[i] for i in chosen], [split.split_of[i] for i in chosen],
                                  [split.labels[i] for i in chosen])
        boxes = read_boxes(base / BOXES, {_key(f) for f in files}) if (base / BOXES).is_file() else None
        if boxes is not None:
            missing = [f for f in sel.names if _key(f) not in boxes]
            if missing:
                raise BenchError(f"{base / BOXES}: {len(missing)} selected image(s) are not listed (e.g. {missing[0]}); "
                                 "list every image, with a row holding only its name if it has no face")
            sel.boxes = [boxes[_key(f)] for f in sel.names]
        table = read_table(base / ATTRIBUTES, {_key(f) for f in files}) if (base / ATTRIBUTES).is_file() else None
        for attr, (codes, names) in (table_codes(table, sel.names) if table is not None else {}).items():
            sel.attrs[attr], sel.attr_names[attr] = codes, names
        index = FolderIndex(opts, base, {}, skipped, {}, table, boxes)
        return index, sel, split


def _listing(base: Path, own_splits: bool) -> tuple[list[str], list[str], list[str], list[str]]:
    """Lists the images under ``base``: relative paths, their own split ("" none), class, and skipped files.

    With ``own_splits``, a root holding a train folder and a val or test folder is read as
    split folders; otherwise the root is one class-per-folder tree.
    """
    folders = {SPLIT_WORDS[d.name.lower()]: d for d in sorted(base.iterdir())
               if d.is_dir() and d.name.lower() in SPLIT_WORDS} if own_splits else {}
    if "train" not in folders or not ({"val", "test"} & set(folders)):
        classes, skipped = scan_tree(base)
        files = [f for c in classes for f in classes[c]]
        return files, [""] * len(files), [f.split("/", 1)[0] for f in files], skipped
    files, own, keys, skipped = [], [], [], []
    for split, folder in sorted(folders.items()):
        classes, rest = scan_tree(folder)
        prefix = folder.name
        skipped += [f"{prefix}/{f}" for f in rest]
        for c, names in classes.items():
            files += [f"{prefix}/{f}" for f in names]
            own += [split] * len(names)
            keys += [c] * len(names)
    return files, own, keys, skipped


def labelled_shape(sel: imageread.Selection) -> DataShape:
    """Returns each split's shape: images per class, the attributes it labels, and images with a face box.

    A split labels the attributes some of its images have a value of (none without
    ``attributes.csv`` or attribute columns): an adversary inferring another is refused
    when the cell is planned, not after its task has trained.
    """
    shape = {}
    for s in SPLITS:
        members = [i for i, sp in enumerate(sel.split_of) if sp == s]
        faces = 0 if sel.boxes is None else sum(1 for i in members if len(sel.boxes[i]))
        shape[s] = SplitShape.of_labels([sel.labels[i] for i in members], labelled_in(sel.attrs, members), faces=faces)
    return shape


def face_fraction(images: ImageSet) -> list[float]:
    """Returns each image's fraction of pixels inside the union of its face boxes (stored pixels)."""
    height, width = images.images.shape[-2:]
    out = []
    for boxes in images.boxes or []:
        mask = np.zeros((height, width), dtype=bool)
        for x1, y1, x2, y2 in torch.as_tensor(boxes).reshape(-1, 4).tolist():
            mask[max(0, int(round(y1))):max(0, int(round(y2))), max(0, int(round(x1))):max(0, int(round(x2)))] = True
        out.append(float(mask.mean()))
    return out
