"""Face crops labelled by attributes and not by person: ``ROOT/attributes.csv`` lists the images.

A folder of faces labelled only by gender, age (UTKFace-style crops named
``age_gender_race_date.jpg``, a FairFace export, photos tagged by hand) has no folder per
person, so neither few-shot identification (``folder``) nor a classifier of classes
(``labelled_folder``) fits it. ``attribute_folder`` reads it as ``fairface`` is read: the images
are the rows of ``ROOT/attributes.csv`` (``file,<attribute>,...``, paths relative to ROOT, at
any depth, the root itself included); image files under ROOT that it does not list are
counted and left out. Values are coded by :mod:`bench.data.attribute_table` (``age`` in years
binned into FairFace's nine age groups; an empty cell unlabelled). The images are split by
image into train / val / test (``split_fractions``), stratified by the ``stratify``
attribute (default: the first column; its unlabelled images are a stratum of their own)
with a seeded permutation per stratum. There are no identities: an image's label is its own
row index. Optional ``ROOT/boxes.csv`` gives face boxes as for ``folder``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

import torch

from bench.core.registry import register_dataset
from bench.data import imageread
from bench.data.attribute_table import ATTRIBUTES, coding_note, file_key, read_table, table_codes
from bench.data.base import DataShape, ImageSet, Splits
from bench.data.classsplit import parse_options
from bench.data.imagesplit import SPLITS, allocate
from bench.data.loaders.folder import BOXES, Folder, FolderIndex, read_boxes
from bench.data.loaders.labelled_folder import face_fraction, labelled_shape
from bench.data.options import integer_option
from bench.errors import BenchError
from bench.randomness.seeding import make_generator

DEFAULTS: dict[str, Any] = {"root": None, "size": None, "split_fractions": (0.7, 0.1, 0.2), "seed": 0, "grey": None,
                            "stratify": None, "max_images": None}


def list_images(base: Path) -> dict[str, str]:
    """Returns every image file under ``base`` (any depth; hidden files and folders skipped): its key -> its path."""
    suffixes = imageread.image_suffixes()
    found = {}
    for folder, dirs, files in os.walk(base, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        rel = Path(folder).relative_to(base).as_posix()
        for name in files:
            if not name.startswith(".") and Path(name).suffix.lower() in suffixes:
                path = name if rel == "." else f"{rel}/{name}"
                found[file_key(path)] = path
    return found


def stratified_split(strata: list[int], fractions: tuple[float, ...], seed: int, dataset: str) -> list[str]:
    """Assigns each image a split: every stratum's images permuted (seeded) and cut by ``fractions``."""
    by_stratum: dict[int, list[int]] = {}
    for i, code in enumerate(strata):
        by_stratum.setdefault(code, []).append(i)
    split_of = [""] * len(strata)
    for code, members in sorted(by_stratum.items()):
        order = torch.randperm(len(members), generator=make_generator(seed, dataset, "images", str(code))).tolist()
        start = 0
        for split, n in zip(SPLITS, allocate(len(members), fractions)):
            for j in order[start:start + n]:
                split_of[members[j]] = split
            start += n
    return split_of


@register_dataset("attribute_folder")
class AttributeFolder(Folder):
    """Face images labelled by attributes in ``ROOT/attributes.csv``, no identities, split by image.

    Options:
        root: The folder (required; ``--set task.data.root=DIR``).
        size: Most stored side, or [height, width] (default: none, the images' own smallest
            common size: the mechanism runs on the pixels they have; the networks resize).
        split_fractions: Train / val / test fractions of each stratum (default 0.7, 0.1, 0.2).
        stratify: The attribute the split is stratified by (default: the first column).
        max_images: Use this many listed images, a seeded choice (default: all).
        seed: Seed of the choice and the split (default 0).
        grey: Store one grey channel instead of RGB (default: when every image has one channel).
    """

    layout = ("ROOT/attributes.csv (file,<attribute>,..., e.g. file,gender,age; one row per image, paths relative "
              "to ROOT at any depth) and the images it lists (any format PIL reads; set ROOT with --set "
              "task.data.root=DIR), optional ROOT/boxes.csv (file,x1,y1,x2,y2)")
    description = "your face images labelled by attributes (attributes.csv: gender, age, ...), no identities"

    def inspect(self, root: Path | None, options: Mapping[str, Any]) -> DataShape:
        """Reads attributes.csv and lists the folder (no image is opened); returns the splits' shapes."""
        return labelled_shape(self._select(root, options)[1])

    def load(self, root: Path | None, options: Mapping[str, Any], cache_dir: Path) -> Splits:
        """Decodes the listed images into the cache once (or reads them from it).

        Raises:
            BenchError: A missing folder or attributes.csv, a row naming no image of the
                folder, bad options, or an image that cannot be read (naming it).
        """
        index, sel, how = self._select(root, options)
        sets, content, built = self._decode(index, sel, cache_dir, "attributes")
        info = {
            "source": str(index.base), "split": how,
            "options": {k: (list(v) if isinstance(v, tuple) else v) for k, v in index.opts.items() if k != "root"},
            "n_images": {s: len(sets[s]) for s in SPLITS},
            "attributes": [coding_note(a, sel.attr_names[a]) for a in sel.attrs],
            "unlabelled": {a: sum(c < 0 for c in codes) for a, codes in sel.attrs.items()},
            "unlisted": {"files": len(index.skipped), "examples": index.skipped[:5],
                         "why": f"image files under the root that {ATTRIBUTES} does not list"},
            "annotations": [n for n, a in ((ATTRIBUTES, index.attributes), (BOXES, index.boxes)) if a is not None],
            **built,
        }
        if index.boxes is not None:
            info["face_fraction"] = {s: face_fraction(sets[s]) for s in SPLITS}
        imageread.warn_about(self.name, info)
        return Splits(self.name, sets, content, synthetic=False, info=info)

    def load_public(self, root: Path | None, options: Mapping[str, Any], cache_dir: Path) -> ImageSet | None:
        """None: every listed image is in a split."""
        return None

    def _select(self, root: Path | None, options: Mapping[str, Any]
                ) -> tuple[FolderIndex, imageread.Selection, str]:
        """Reads the table and lists the folder: the index, the selection to decode and the split rule in words."""
        opts = parse_options(self.name, options, DEFAULTS)
        if opts["max_images"] is not None:
            opts["max_images"] = integer_option(self.name, "max_images", opts["max_images"], 2)
        base = self._base(root, opts["root"])
        if not (base / ATTRIBUTES).is_file():
            raise BenchError(f"{self.name}: no {ATTRIBUTES} in {base}; expected {self.layout}")
        images = list_images(base)
        table = read_table(base / ATTRIBUTES, set(images))
        names, rows = table
        listed = sorted(images[key] for key in rows)  # the files' own names (the table's may differ in form)
        if opts["max_images"] is not None and len(listed) > opts["max_images"]:
            g = make_generator(opts["seed"], self.name, "max_images")
            listed = sorted(listed[i] for i in torch.randperm(len(listed), generator=g)[: opts["max_images"]].tolist())
        stratify = opts["stratify"] if opts["stratify"] is not None else names[0]
        if stratify not in names:
            raise BenchError(f"{self.name}: stratify={stratify!r} is not a column of {base / ATTRIBUTES} "
                             f"(columns: {', '.join(names)})")
        codes = table_codes(table, listed)
        split_of = stratified_split(codes[stratify][0], opts["split_fractions"], opts["seed"], self.name)
        for split in ("train", "test"):
            if split not in split_of:
                raise BenchError(f"{self.name}: the {split} split of the {len(listed)} listed image(s) is empty "
                                 "(list more images, or change --set task.data.split_fractions=TRAIN,VAL,TEST)")
        sel = imageread.Selection(SPLITS, listed, split_of, list(range(len(listed))))
        for attr, (values, value_names) in codes.items():
            sel.attrs[attr], sel.attr_names[attr] = values, value_names
        boxes = read_boxes(base / BOXES, set(images)) if (base / BOXES).is_file() else None
        if boxes is not None:
            missing = [f for f in listed if file_key(f) not in boxes]
            if missing:
                raise BenchError(f"{base / BOXES}: {len(missing)} listed image(s) have no row (e.g. {missing[0]}); "
                                 "list every image, with a row holding only its name if it has no face")
            sel.boxes = [boxes[file_key(f)] for f in listed]
        how = (f"by image, stratified by {stratify}, seed {opts['seed']}, fractions "
               f"{', '.join(f'{f:g}' for f in opts['split_fractions'])}")
        unlisted = sorted(images[key] for key in set(images) - set(rows))
        return FolderIndex(opts, base, {}, unlisted, {}, table, boxes), sel, how
