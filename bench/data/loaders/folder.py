"""Any class-per-folder tree of images: ``ROOT/<label>/<image>``, with optional annotations.

Every image below a class folder (recursively; hidden files and folders skipped; files
whose suffix is not a raster format PIL opens skipped and counted) belongs to the class
named by its first folder: an identity for face tasks, a class for classification.
Files are taken in sorted path order, and the classes with at least ``min_images``
images are split into class-disjoint train / val / test sets by a seeded permutation,
so the splits are reproducible from the folder and the seed.

Optional annotations at the root, paths relative to it (``alice/001.jpg``):

- ``attributes.csv``: a header ``file,<attribute>,...`` and one row per image; values are
  names or integers, an empty cell or an image without a row is unlabelled (-1);
- ``boxes.csv``: ``file,x1,y1,x2,y2`` rows in pixels of the image as displayed (after its
  EXIF orientation); an image may have several rows, one with only its name has no face.
  When the file exists it must list every selected image: an image left out would keep
  its face. Boxes follow the crop and resize to the stored size.

Images are read by :mod:`bench.data.imageread` (any PIL format and mode, EXIF
orientation, centre crop to the stored aspect ratio, antialiased resize). They are stored
at their own (smallest common) size, whatever the profile, so the mechanism runs on the
user's pixels and the task's networks resize after the release
(:mod:`bench.data.stored_size`); a ``size`` the user sets is the most they are stored at.
A tree of one-channel images is stored grey unless ``grey`` says otherwise. The folder is
shaped by the options every loader names the same (:data:`bench.data.classsplit.SHAPE_OPTIONS`):
``max_classes``, ``per_class``, ``test_classes`` and ``min_test_classes``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np
import torch

from bench.core.registry import register_dataset
from bench.data import imageread
from bench.data import stored_size as storage
from bench.data.attribute_table import ATTRIBUTES, CODING_VERSION, labelled_in, read_table, table_codes
from bench.data.attribute_table import csv_rows as _rows
from bench.data.attribute_table import file_key as _key
from bench.data.base import (
    Dataset,
    DataShape,
    ImageSet,
    Splits,
    SplitShape,
    cached_sharded_splits,
    fingerprint,
    source_fingerprint,
)
from bench.data.classsplit import COMMON_DEFAULTS, SPLITS, cap_per_class, parse_options, split_classes
from bench.data.imageio import parse_box
from bench.errors import BenchError
from bench.randomness.seeding import make_generator

LOADER_VERSION = 3
"""2: images smaller than ``size`` are stored at their own size, not upscaled; one-channel trees are stored grey.
3: stored at the images' own size by default (no profile cap); ``per_class``, ``test_classes``, ``min_test_classes``."""
BOXES = "boxes.csv"
DEFAULTS: dict[str, Any] = {"root": None, **COMMON_DEFAULTS}


def scan_tree(root: Path) -> tuple[dict[str, list[str]], list[str]]:
    """Lists the images of a class-per-folder tree (no decoding).

    Returns:
        Class -> its images' relative posix paths, sorted; and the skipped files (not a
        raster format by suffix, or not inside a class folder), sorted.
    """
    suffixes = imageread.image_suffixes()
    classes: dict[str, list[str]] = {}
    skipped: list[str] = []
    seen: set[str] = set()
    for folder, dirs, files in os.walk(root, followlinks=True):
        real = os.path.realpath(folder)
        if real in seen:  # a link cycle
            dirs[:] = []
            continue
        seen.add(real)
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        rel = Path(folder).relative_to(root).as_posix()
        for name in files:
            if name.startswith("."):
                continue
            path = name if rel == "." else f"{rel}/{name}"
            if rel == "." and name in (ATTRIBUTES, BOXES):
                continue
            if rel == "." or Path(name).suffix.lower() not in suffixes:
                skipped.append(path)
            else:
                classes.setdefault(path.split("/", 1)[0], []).append(path)
    return {c: sorted(v) for c, v in sorted(classes.items())}, sorted(skipped)


def read_boxes(path: Path, images: set[str]) -> dict[str, np.ndarray]:
    """Reads ``boxes.csv``: ``file,x1,y1,x2,y2`` rows (an optional header; a row with only a name: no box).

    Returns:
        Image -> float [k, 4] boxes, for the images listed.

    Raises:
        BenchError: A malformed row or box, or a file that is not an image of the tree.
    """
    found: dict[str, list[list[float]]] = {}
    for line, cells in enumerate(_rows(path), start=1):
        if not any(cells) or (line == 1 and cells[0].lower() == "file"):
            continue
        name = _key(cells[0])
        if name not in images:
            raise BenchError(f"{path}:{line}: {cells[0]!r} is not an image of the tree (paths are relative to the "
                             "root, e.g. alice/001.jpg)")
        boxes = found.setdefault(name, [])
        if not any(cells[1:]):
            continue
        boxes.append(parse_box(cells, f"{path}:{line}"))
    return {k: np.asarray(v, dtype=np.float64).reshape(-1, 4) for k, v in found.items()}


@dataclass
class FolderIndex:
    """What a folder holds and what the options select from it (no pixels read)."""

    opts: dict[str, Any]
    base: Path
    classes: dict[str, list[str]]
    skipped: list[str]
    groups: dict[str, list[str]]
    attributes: tuple[list[str], dict[str, list[str]]] | None
    boxes: dict[str, np.ndarray] | None

    def selection(self, groups: Mapping[str, list[str]] | None = None, limit: Sequence[str] | None = None
                  ) -> imageread.Selection:
        """Returns the images of the chosen classes in path order, with labels and annotations.

        Args:
            groups: Split -> classes (default: the splits).
            limit: Only these images (public images: they carry no boxes, as they are never released).
        """
        groups = self.groups if groups is None else groups
        split_of = {c: s for s, cs in groups.items() for c in cs}
        label = {c: i for i, c in enumerate(self.classes)}
        picked = sorted(f for c in split_of for f in self.classes[c]) if limit is None else list(limit)
        sel = imageread.Selection(tuple(groups), picked, [split_of[f.split("/", 1)[0]] for f in picked],
                                  [label[f.split("/", 1)[0]] for f in picked])
        if self.attributes is not None:
            for attr, (codes, names) in table_codes(self.attributes, picked).items():
                sel.attrs[attr], sel.attr_names[attr] = codes, names
        if self.boxes is not None and limit is None:
            missing = [f for f in picked if _key(f) not in self.boxes]
            if missing:
                raise BenchError(f"{self.base / BOXES}: {len(missing)} selected image(s) are not listed (e.g. "
                                 f"{missing[0]}); list every image, with a row holding only its name if it has no face")
            sel.boxes = [self.boxes[_key(f)] for f in picked]
        return sel


@register_dataset("folder")
class Folder(Dataset):
    """Your own images, one folder per class or person, split class-disjointly.

    Options:
        root: The tree (required; a relative path is tried under the data root when it is
            not found from the working directory).
        size: Most stored side, or [height, width] (default: none, the images' own
            smallest common size, so the mechanism runs at the size they have; smaller
            images are never upscaled).
        min_images: Classes with fewer images are left out of the splits (default 2).
        split_fractions: Train / val / test fractions of the classes (default 0.64, 0.16, 0.20).
        seed: Seed of the class permutation (default 0).
        max_classes: Use at most this many classes (default: all).
        per_class: Use at most this many images of each class, a seeded choice (default: all).
        test_classes: Exactly this many test classes; train and val share the rest in
            their fractions' proportion (default: split_fractions decides).
        min_test_classes: At least this many test classes where as many remain for train
            and val (profiles set it: a face folder of 40 people has 20 test people).
        grey: Store one grey channel instead of RGB (default: when every image has one
            channel; true or false overrides).
    """

    own_size: ClassVar[bool] = True
    """Store images smaller than ``size`` at their own size (the task's networks resize after the release)."""
    layout = ("ROOT/<label>/<image> (any format PIL reads; set ROOT with --set task.data.root=DIR), with optional "
              "ROOT/attributes.csv (file,<attribute>,...) and ROOT/boxes.csv (file,x1,y1,x2,y2)")
    version = LOADER_VERSION
    class_split = "split_fractions"
    description = "any class-per-folder tree of images (labels: identities or classes), class-disjoint splits"

    def inspect(self, root: Path | None, options: Mapping[str, Any]) -> DataShape:
        """Lists the tree, reads the annotations and the images' headers (no pixels); returns the splits' shapes."""
        index = self._index(root, options)
        sel = index.selection()
        members = {s: [i for i, sp in enumerate(sel.split_of) if sp == s] for s in SPLITS}
        stored = self._storage(index, sel).size
        return {s: replace(SplitShape.of_labels([sel.labels[i] for i in members[s]],
                                                labelled_in(sel.attrs, members[s])), stored=stored)
                for s in SPLITS}

    def load(self, root: Path | None, options: Mapping[str, Any], cache_dir: Path) -> Splits:
        """Decodes the selected images into the cache once (or reads them from it).

        Args:
            root: The data root (only used to find a relative ``root`` option).
            options: See the class docstring.
            cache_dir: Decoded splits are cached under ``cache_dir/datasets/folder``.

        Raises:
            BenchError: A missing or empty tree, bad options or annotations, too few classes,
                or an image that cannot be read (naming it).
        """
        index = self._index(root, options)
        sel = index.selection()
        sets, content, built = self._decode(index, sel, cache_dir, "splits")
        left_out = [c for c, files in index.classes.items() if len(files) < index.opts["min_images"]]
        info = {
            "source": str(index.base),
            "options": {k: (list(v) if isinstance(v, tuple) else v) for k, v in index.opts.items()},
            "classes": {s: len(index.groups[s]) for s in SPLITS},
            "n_images": {s: len(sets[s]) for s in SPLITS},
            "class_names": {s: list(index.groups[s]) for s in SPLITS},
            "left_out": {"classes": len(left_out), "examples": left_out[:5],
                         "why": f"fewer than min_images={index.opts['min_images']} images"},
            "skipped": {"files": len(index.skipped), "examples": index.skipped[:5]},
            "annotations": [n for n, a in ((ATTRIBUTES, index.attributes), (BOXES, index.boxes)) if a is not None],
            **built,
        }
        imageread.warn_about(self.name, info)
        return Splits(self.name, sets, content, synthetic=False, info=info)

    def load_public(self, root: Path | None, options: Mapping[str, Any], cache_dir: Path) -> ImageSet | None:
        """Decodes public images: classes in no split (below min_images, beyond max_classes), never released.

        As many images as the train split has (fewer if there are not so many), a seeded
        choice; None when every class is in a split.
        """
        index = self._index(root, options)
        used = {c for cs in index.groups.values() for c in cs}
        pool = [f for c, files in index.classes.items() if c not in used for f in files]
        if not pool:
            return None
        n_train = sum(len(index.classes[c]) for c in index.groups["train"])
        g = make_generator(index.opts["seed"], "folder", "public")
        chosen = sorted(pool[i] for i in torch.randperm(len(pool), generator=g)[:n_train].tolist())
        groups = {"train": sorted({f.split("/", 1)[0] for f in chosen})}
        fixed = self._storage(index, index.selection())
        sets, _, _ = self._decode(index, index.selection(groups, chosen), cache_dir, "public", fixed)
        return sets["train"]

    def _decode(self, index: FolderIndex, sel: imageread.Selection, cache_dir: Path, purpose: str,
                fixed: storage.Storage | None = None):
        """Decodes a selection at the splits' storage (``fixed``, for public images) or its own."""
        files = [index.base / f for f in sel.names]
        annotations = [(n, fingerprint((index.base / n).read_bytes()), *([CODING_VERSION] if n == ATTRIBUTES else []))
                       for n in (ATTRIBUTES, BOXES) if (index.base / n).is_file()]
        opts = sorted((k, v) for k, v in index.opts.items() if k != "root")
        key = fingerprint(self.name, LOADER_VERSION, purpose, opts, annotations,
                          "\n".join(f"{s}\t{lab}\t{n}" for s, lab, n in zip(sel.split_of, sel.labels, sel.names)),
                          source_fingerprint(files), self.own_size, None if fixed is None else (fixed.size, fixed.grey))

        def build(sink) -> dict[str, Any]:
            stored = fixed or self._storage(index, sel)
            built = imageread.write_selection(sink, sel, files, stored.size, stored.grey)
            return {**built, "storage": stored.info(index.opts["size"])}

        return cached_sharded_splits(cache_dir, self.name, key, build)

    def _storage(self, index: FolderIndex, sel: imageread.Selection) -> storage.Storage:
        """Surveys the selection's headers (no pixels) and returns the size and channels it is stored at."""
        return storage.resolve(((f, index.base / f) for f in sel.names), index.opts["size"], index.opts["grey"],
                               self.own_size)

    def _index(self, root: Path | None, options: Mapping[str, Any]) -> FolderIndex:
        opts = parse_options(self.name, options, DEFAULTS)
        index = self._read_tree(root, opts)
        index.groups = split_classes({c: len(v) for c, v in index.classes.items()}, opts, self.name)
        index.selection()  # every selected image must have its boxes listed
        return index

    def _read_tree(self, root: Path | None, opts: dict[str, Any]) -> FolderIndex:
        """Lists the tree and reads its annotations; the index's ``groups`` are left empty."""
        base = self._base(root, opts["root"])
        classes, skipped = scan_tree(base)
        if not classes:
            raise BenchError(f"{self.name}: no images in class folders under {base} ({len(skipped)} other file(s)); "
                             f"expected {self.layout}")
        images = {_key(f) for files in classes.values() for f in files}  # annotations may list images left out
        classes = cap_per_class(classes, opts.get("per_class"), opts["seed"], self.name)
        attributes = read_table(base / ATTRIBUTES, images) if (base / ATTRIBUTES).is_file() else None
        boxes = read_boxes(base / BOXES, images) if (base / BOXES).is_file() else None
        return FolderIndex(opts, base, classes, skipped, {}, attributes, boxes)

    def _base(self, data_root: Path | None, given: Any) -> Path:
        if given is None:
            raise BenchError(f"{self.name}: no image tree given; expected {self.layout}")
        path = Path(str(given)).expanduser()
        if not path.is_absolute() and not path.exists() and data_root is not None and (Path(data_root) / path).exists():
            path = Path(data_root) / path
        if not path.exists():
            raise BenchError(f"{self.name}: the image tree {path} does not exist; expected {self.layout}")
        if not path.is_dir():
            raise BenchError(f"{self.name}: {path} is a file, not a folder; expected {self.layout}")
        return path.resolve()
