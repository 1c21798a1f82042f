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
orientation, centre crop to the stored aspect ratio, antialiased resize). The ``size``
option is the most they are stored at: images smaller than it are stored at their own
(smallest common) size, so the mechanism runs on the user's pixels and the task's networks
resize after the release (:mod:`bench.data.stored_size`); a tree of one-channel images is
stored grey unless ``grey`` says otherwise.
"""

from __future__ import annotations

import csv
import os
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np
import torch

from bench.core.registry import register_dataset
from bench.data import imageread
from bench.data import stored_size as storage
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
from bench.data.classsplit import COMMON_DEFAULTS, SPLITS, code_values, parse_options, split_classes
from bench.data.imageio import parse_box
from bench.errors import BenchError
from bench.randomness.seeding import make_generator

LOADER_VERSION = 2
"""2: images smaller than ``size`` are stored at their own size, not upscaled; one-channel trees are stored grey."""
ATTRIBUTES = "attributes.csv"
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


def _key(name: str) -> str:
    return unicodedata.normalize("NFC", name.strip().replace("\\", "/").removeprefix("./"))


def _rows(path: Path) -> list[list[str]]:
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            return [[c.strip() for c in row] for row in csv.reader(f)]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise BenchError(f"cannot read {path} as a UTF-8 CSV ({type(exc).__name__}: {exc})") from None


def read_attributes(path: Path, images: set[str]) -> tuple[list[str], dict[str, list[str]]]:
    """Reads ``attributes.csv``: a ``file,<attribute>,...`` header, then one row per image.

    Returns:
        The attribute names and image -> its values (strings, "" unlabelled).

    Raises:
        BenchError: No header, a duplicate column or row, a row of the wrong length, or a
            file that is not an image of the tree (each naming the line).
    """
    rows = _rows(path)
    if not rows or not rows[0] or rows[0][0].lower() != "file" or len(rows[0]) < 2:
        got = ",".join(rows[0]) if rows else "an empty file"
        raise BenchError(f"{path}: the first line must be a header file,<attribute>,... (got {got})")
    names = rows[0][1:]
    if len(set(names)) != len(names) or "" in names:
        raise BenchError(f"{path}:1: attribute names must be distinct and non-empty, got {','.join(names)}")
    table: dict[str, list[str]] = {}
    for line, cells in enumerate(rows[1:], start=2):
        if not any(cells):
            continue
        name = _key(cells[0])
        if len(cells) != len(names) + 1:
            raise BenchError(f"{path}:{line}: expected {len(names) + 1} fields (file,{','.join(names)}), "
                             f"got {len(cells)}")
        if name not in images:
            raise BenchError(f"{path}:{line}: {cells[0]!r} is not an image of the tree (paths are relative to the "
                             "root, e.g. alice/001.jpg)")
        if name in table:
            raise BenchError(f"{path}:{line}: a second row for {cells[0]!r}")
        table[name] = cells[1:]
    return names, table


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
            names, table = self.attributes
            for j, attr in enumerate(names):
                sel.attrs[attr], sel.attr_names[attr] = code_values([table.get(_key(f), [""] * len(names))[j]
                                                                     for f in picked])
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
        size: Most stored side, or [height, width] (default 84): smaller images are
            stored at their own size (the smallest common one), never upscaled.
        min_images: Classes with fewer images are left out of the splits (default 2).
        split_fractions: Train / val / test fractions of the classes (default 0.64, 0.16, 0.20).
        seed: Seed of the class permutation (default 0).
        max_classes: Use at most this many classes (default: all).
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
        """Lists the tree and reads the annotations (no image is opened); returns the splits' shapes."""
        index = self._index(root, options)
        sel = index.selection()
        labelled = tuple(index.attributes[0]) if index.attributes is not None else ()  # attributes.csv's columns
        return {s: SplitShape.of_labels([lab for lab, sp in zip(sel.labels, sel.split_of) if sp == s], labelled)
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
        splits = index.selection()
        fixed = storage.resolve(((f, index.base / f) for f in splits.names), index.opts["size"], index.opts["grey"],
                                self.own_size)
        sets, _, _ = self._decode(index, index.selection(groups, chosen), cache_dir, "public", fixed)
        return sets["train"]

    def _decode(self, index: FolderIndex, sel: imageread.Selection, cache_dir: Path, purpose: str,
                fixed: storage.Storage | None = None):
        """Decodes a selection at the splits' storage (``fixed``, for public images) or its own."""
        files = [index.base / f for f in sel.names]
        annotations = [(n, fingerprint((index.base / n).read_bytes())) for n in (ATTRIBUTES, BOXES)
                       if (index.base / n).is_file()]
        opts = sorted((k, v) for k, v in index.opts.items() if k != "root")
        key = fingerprint(self.name, LOADER_VERSION, purpose, opts, annotations,
                          "\n".join(f"{s}\t{lab}\t{n}" for s, lab, n in zip(sel.split_of, sel.labels, sel.names)),
                          source_fingerprint(files), self.own_size, None if fixed is None else (fixed.size, fixed.grey))

        def build(sink) -> dict[str, Any]:
            stored = fixed or storage.resolve(zip(sel.names, files), index.opts["size"], index.opts["grey"],
                                              self.own_size)
            built = imageread.write_selection(sink, sel, files, stored.size, stored.grey)
            return {**built, "storage": stored.info(index.opts["size"])}

        return cached_sharded_splits(cache_dir, self.name, key, build)

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
        images = {_key(f) for files in classes.values() for f in files}
        attributes = read_attributes(base / ATTRIBUTES, images) if (base / ATTRIBUTES).is_file() else None
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
