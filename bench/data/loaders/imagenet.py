"""ILSVRC-2012 (ImageNet) with the face boxes of the face-obfuscation paper, streamed into shards.

Layout (under the data root, in ``imagenet/``, ``ILSVRC2012/``, ... or the root itself)::

    train/<wnid>/*.JPEG                  the training images, one folder per class
    val/<wnid>/*.JPEG                    the 50,000 validation images, sorted into class folders
    face_annotations_ILSVRC.json         the paper's released face boxes (required)
    bbox/train/<wnid>/<stem>.xml         optional ILSVRC localisation boxes (PASCAL VOC XML);
    bbox/val/<stem>.xml                    also Annotations/CLS-LOC/{train,val}/... (Kaggle's layout)

Kaggle's ``ILSVRC/Data/CLS-LOC/{train,val}`` is found as well. Only the folder listing and
the annotations are read to plan the splits (:meth:`ImageNet.inspect` decodes nothing).

**Splits.** ``test`` is the official validation set (the paper reports on it). With
``val_from=train`` (default) ``val``, for model selection, is ``val_fraction`` of each
class's training images held out by a seeded per-class permutation (at least one when a
class has two, never all of them), and ``train`` is the rest: the three are disjoint. With
``val_from=official``, ``val`` is the official validation set itself, the very images of
``test`` (what the paper's training script does: it keeps the checkpoint that scores best
on it); ``info["val_is_test"]`` says so. Labels index the kept wnids in sorted order
(``info["classes"]``).

**Images** are fitted by :mod:`bench.data.imageread` as for every image loader: a
centre crop to the stored aspect ratio (for a square: the shorter side, centred), then an
antialiased resize to ``size`` (224 by default: the paper's input). They are decoded
:data:`bench.data.imageread.CHUNK` at a time and written into Arrow shards
(:class:`bench.data.shards.ShardedImages`): a split is never held in memory whole.
Pixels are taken in stored order, without the EXIF orientation that a few JPEGs carry: the
face and object boxes are given in that frame (the authors' scripts, like torchvision's
ImageNet loader, open images without applying it), so a rotated image would move its faces
away from their boxes.

**Faces** (:mod:`bench.data.loaders.imagenet_annotations`): the released boxes are pixels of
the original image (PIL's convention; the authors draw them unscaled on the original).
They go through the same crop and resize (:func:`bench.data.imageread.fit_boxes`:
clipped to the crop, boxes left without area dropped) into ``ImageSet.boxes``, float32
[k, 4] (x1, y1, x2, y2) in stored pixels, where ``face_blur`` and ``face_overlay`` read
them. An image with no entry in the file was not annotated, which is not the same as an
image annotated with no face: both get no box (a mechanism leaves them as they are, and
the authors' blurring script skips them), but ``attrs["faces"]`` holds the number of faces
annotated on the original image and -1 for an image without an entry, and
``info["face_counts"]`` counts both kinds per split (a warning names unannotated images).

**Identities** (option ``face_identities``, :mod:`bench.data.loaders.imagenet_faces`): the
paper's faces have none, so by default there is no ``info["faces"]`` and the ImageNet
benchmarks skip the adversaries that re-identify face crops. A CSV of ``url,box,identity``
rows gives them people: ``info["faces"][split]`` is then the face table synth_scenes has
(``image``, ``identity``, ``box`` in stored pixels) and ``info["face_identities"]`` says
what was matched and how many identities are usable. The file is checked when a cell is
planned; it is not part of the decoded shards' key (the pixels do not depend on it): the
face crops are keyed by the table's content (:mod:`bench.release.facecrops`).

**Object boxes**, where the localisation XML has the image: ``info["object_face_fraction"]``
holds per split a float32 tensor, one value per image in split order, the fraction of the
object area (union of object boxes) covered by faces, computed on the original image (NaN
without object boxes or without a face annotation); ``info["object_face_fraction_by_class"]``
averages it per class (the paper's Fig. 4).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from bench.core.registry import register_dataset
from bench.data import imageread
from bench.data.base import (
    Dataset,
    DataShape,
    Splits,
    SplitShape,
    cached_sharded_splits,
    fingerprint,
    source_fingerprint,
)
from bench.data.classsplit import parse_options
from bench.data.loaders import imagenet_annotations as ann
from bench.data.loaders import imagenet_faces as faces_io
from bench.errors import BenchError
from bench.randomness.seeding import make_generator

LOADER_VERSION = 3
"""2: the build keeps each image's crop (for the face table of ``face_identities``); 3: pixels
in stored order, EXIF orientation not applied (the frame of the face and object boxes)."""
BASES = ("imagenet", "ImageNet", "ILSVRC2012", "ilsvrc2012", "ILSVRC", "")
IMAGE_DIRS = ("", "Data/CLS-LOC", "ILSVRC/Data/CLS-LOC")
BOX_DIRS = ("bbox", "Annotations/CLS-LOC", "Annotations", "ILSVRC/Annotations/CLS-LOC")
SPLITS = ("train", "val", "test")
VAL_FROM = ("train", "official")
DEFAULTS: dict[str, Any] = {"size": 224, "classes": None, "per_class": None, "val_from": "train",
                            "val_fraction": 0.04, "seed": 0, "face_identities": None}


@dataclass
class Layout:
    """Where the pieces are: ``images`` holds ``train/`` and ``val/``; ``boxes`` the XML (or None)."""

    base: Path
    images: Path
    faces: Path
    boxes: Path | None


@dataclass
class Plan:
    """What the options select (no pixel read): images in reading order, their split, label and faces.

    ``names`` are relative to ``layout.images`` (``train/<wnid>/<file>``, ``val/<wnid>/<file>``);
    ``keys`` their annotation keys (:func:`~bench.data.loaders.imagenet_annotations.image_key`);
    ``faces`` holds each image's face boxes in original pixels, None when it has no entry;
    ``identities`` the checked ``face_identities`` file, or None.
    """

    opts: dict[str, Any]
    layout: Layout
    wnids: list[str]
    names: list[str]
    keys: list[str]
    split_of: list[str]
    labels: list[int]
    faces: list[np.ndarray | None]
    annotations: ann.FaceAnnotations
    skipped: int
    identities: faces_io.FaceIdentities | None = None

    def files(self) -> list[Path]:
        """The image files, in reading order."""
        return [self.layout.images / n for n in self.names]

    def face_counts(self) -> list[int]:
        """Faces annotated on each image (-1: no entry)."""
        return [-1 if f is None else len(f) for f in self.faces]

    def digest(self) -> str:
        """A digest of the selection and its face boxes (part of the cache key)."""
        import xxhash

        h = xxhash.xxh3_128()
        for name, split, label, faces in zip(self.names, self.split_of, self.labels, self.faces):
            h.update(f"{split}\t{label}\t{name}\t".encode("utf-8", "surrogateescape"))
            h.update(b"-" if faces is None else np.ascontiguousarray(faces, dtype=np.float32).tobytes())
            h.update(b"\n")
        return h.hexdigest()


def list_classes(folder: Path) -> tuple[dict[str, list[str]], list[str], int]:
    """Lists a class-per-folder split (no file opened).

    Returns:
        wnid -> its image files (names, sorted) for every non-empty class folder; image
        files lying directly in ``folder``; and the number of non-image files skipped.
    """
    suffixes = imageread.image_suffixes()
    classes: dict[str, list[str]] = {}
    loose: list[str] = []
    skipped = 0
    with os.scandir(folder) as it:
        entries = sorted((e for e in it if not e.name.startswith(".")), key=lambda e: e.name)
    for entry in entries:
        if entry.is_dir():
            with os.scandir(entry.path) as inner:
                names = [f.name for f in inner if not f.name.startswith(".") and f.is_file()]
            files = sorted(n for n in names if os.path.splitext(n)[1].lower() in suffixes)
            skipped += len(names) - len(files)
            if files:
                classes[entry.name] = files
        elif os.path.splitext(entry.name)[1].lower() in suffixes:
            loose.append(entry.name)
    return classes, loose, skipped


def resolve_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Validates the options and fills in defaults.

    Raises:
        BenchError: An unknown option or a bad value (one line).
    """
    opts = parse_options("imagenet", options, DEFAULTS)
    classes = opts["classes"]
    if isinstance(classes, str):
        classes = int(classes) if classes.strip().isdigit() else [c.strip() for c in classes.split(",") if c.strip()]
    if isinstance(classes, (list, tuple)):
        if not classes or not all(isinstance(c, str) and c for c in classes):
            raise BenchError(f"imagenet: option classes expects a count or a list of wnids, got {opts['classes']!r}")
        classes = sorted(set(classes))
    elif classes is not None and (isinstance(classes, bool) or not isinstance(classes, int) or classes < 1):
        raise BenchError(f"imagenet: option classes expects a count or a list of wnids, got {opts['classes']!r}")
    opts["classes"] = classes
    cap = opts["per_class"]
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
        raise BenchError(f"imagenet: option per_class expects a positive integer, got {cap!r}")
    if opts["val_from"] not in VAL_FROM:
        raise BenchError(f"imagenet: option val_from expects one of {', '.join(VAL_FROM)}, got {opts['val_from']!r}")
    try:
        fraction = float(opts["val_fraction"])
    except (TypeError, ValueError):
        fraction = math.nan
    if not 0 < fraction < 1 or isinstance(opts["val_fraction"], bool):
        raise BenchError(f"imagenet: option val_fraction expects a number between 0 and 1, "
                         f"got {opts['val_fraction']!r}")
    opts["val_fraction"] = fraction
    opts["face_identities"] = faces_io.check_option(opts["face_identities"])
    return opts


def held_out(count: int, fraction: float) -> int:
    """Images of a class held out as val: round(count * fraction), at least 1 when count >= 2, at most count - 1."""
    if count < 2:
        return 0
    return min(count - 1, max(1, round(count * fraction)))


@register_dataset("imagenet")
class ImageNet(Dataset):
    """ILSVRC-2012 with the face-obfuscation paper's face boxes (and ILSVRC object boxes when present).

    Options:
        size: Stored side, or [height, width] (default 224, the paper's declared
            preprocessing, the same in every profile: the mechanism runs at 224).
        classes: A count (the first wnids in sorted order) or a list of wnids (default: all).
        per_class: Keep the first images of each class, in file order, in the
            training set and in the validation set (default: all).
        val_from: ``train`` (default): ``val`` is ``val_fraction`` of each class's training
            images, held out; ``official``: ``val`` is the official validation set, the
            same images as ``test``.
        val_fraction: Fraction held out with ``val_from=train`` (default 0.04, about the 50
            images per class of the official validation set).
        seed: Seed of the held-out choice (default 0).
        face_identities: Path of a CSV ``url,box,identity`` naming the people of annotated
            faces (absolute, or relative to the ImageNet folder); default none. See
            :mod:`bench.data.loaders.imagenet_faces`.
    """

    layout = ("<root>/imagenet/ (or ILSVRC2012/, or <root>/ itself) holding train/<wnid>/*.JPEG, val/<wnid>/*.JPEG "
              f"(the validation images sorted into class folders) and {ann.FACES_FILE} (the face-obfuscation paper's "
              "release), optionally bbox/train/<wnid>/*.xml and bbox/val/*.xml (or Annotations/CLS-LOC/...: ILSVRC "
              "localisation boxes)")
    version = LOADER_VERSION
    description = "ILSVRC-2012 with the face-obfuscation paper's face boxes; test = official val, streamed into shards"

    def inspect(self, root: Path | None, options: Mapping[str, Any]) -> DataShape:
        """Lists the folders and reads the face annotations (no image is decoded); returns the splits' shapes."""
        plan = self._plan(root, options)
        shapes = {s: SplitShape.of_labels([lab for lab, sp in zip(plan.labels, plan.split_of) if sp == s])
                  for s in self._written(plan.opts)}
        if plan.opts["val_from"] == "official":
            shapes["val"] = shapes["test"]
        return {s: shapes[s] for s in SPLITS}

    def load(self, root: Path | None, options: Mapping[str, Any], cache_dir: Path) -> Splits:
        """Decodes the selected images into shards once (or reads them from the cache).

        Raises:
            BenchError: A missing piece of the layout, a malformed annotation, bad options or
                an image that cannot be read (each one line).
        """
        plan = self._plan(root, options)
        opts, files = plan.opts, plan.files()
        xml = self._object_xml(plan)
        shard_options = sorted((k, repr(v)) for k, v in opts.items() if k != "face_identities")  # pixels only
        key = fingerprint(self.name, LOADER_VERSION, shard_options, plan.digest(),
                          "\n".join("-" if x is None else x.name for x in xml),
                          source_fingerprint(files + [x for x in xml if x is not None]))

        def build(sink: Any) -> dict[str, Any]:
            return _build(sink, plan, self._written(opts), files, xml)

        sets, content, built = cached_sharded_splits(cache_dir, self.name, key, build)
        if opts["val_from"] == "official":
            sets["val"] = sets["test"]
        sets = {s: sets[s] for s in SPLITS}
        fractions = built.pop("object_face_fraction")
        crops = built.pop("crops")
        fractions.setdefault("val", fractions["test"])
        info = {
            "source": str(plan.layout.images),
            "options": {k: (list(v) if isinstance(v, tuple) else v) for k, v in opts.items()},
            "classes": list(plan.wnids),
            "n_images": {s: len(sets[s]) for s in SPLITS},
            "split": ("test: the official validation set; val: the official validation set too (val_from=official)"
                      if opts["val_from"] == "official" else
                      f"test: the official validation set; val: {opts['val_fraction']:g} of each class's training "
                      "images held out (seeded), disjoint from train"),
            "val_is_test": opts["val_from"] == "official",
            "face_counts": faces_io.face_report(plan, sets),
            "object_face_fraction": fractions,
            "object_face_fraction_by_class": {s: _by_class(fractions[s], sets[s].labels, plan.wnids) for s in SPLITS},
            "skipped": {"files": plan.skipped},
            **built,
        }
        if plan.identities is not None:
            info["faces"], info["face_identities"] = faces_io.face_tables(plan, plan.identities, crops,
                                                                          self._written(opts))
        faces_io.warn_about(info)
        imageread.warn_about(self.name, info)
        return Splits(self.name, sets, content, synthetic=False, info=info)

    @staticmethod
    def _written(opts: Mapping[str, Any]) -> tuple[str, ...]:
        return ("train", "test") if opts["val_from"] == "official" else SPLITS

    def _locate(self, root: Path | None) -> Layout:
        if root is None or not Path(root).is_dir():
            raise self.missing(root, "the ImageNet folder")
        root = Path(root)
        bases = [root / b for b in BASES]  # root / "" is the root itself
        found = next(((b, b / sub) for b in bases for sub in IMAGE_DIRS if (b / sub / "train").is_dir()), None)
        if found is None:
            raise self.missing(root, "train/<wnid>/ (the ILSVRC-2012 training images)")
        base, images = found
        if not (images / "val").is_dir():
            raise self.missing(root, f"val/<wnid>/ next to {images / 'train'}")
        faces = next((d / ann.FACES_FILE for d in (images, base) if (d / ann.FACES_FILE).is_file()), None)
        if faces is None:
            raise self.missing(root, f"{ann.FACES_FILE} in {images}")
        boxes = next((base / d for d in BOX_DIRS if (base / d / "train").is_dir() or (base / d / "val").is_dir()), None)
        return Layout(base, images, faces, boxes)

    def _plan(self, root: Path | None, options: Mapping[str, Any]) -> Plan:
        opts = resolve_options(options)
        layout = self._locate(root)
        train, loose, skipped = list_classes(layout.images / "train")
        if not train:
            raise self.missing(root, f"images in class folders train/<wnid>/ under {layout.images}")
        val, loose_val, skipped_val = list_classes(layout.images / "val")
        if loose_val and not val:
            raise BenchError(f"imagenet: {layout.images / 'val'} holds {len(loose_val)} image(s) directly; sort the "
                             f"validation images into class folders val/<wnid>/ (expected {self.layout})")
        faces = ann.read_face_annotations(layout.faces)
        wnids = self._classes(opts["classes"], train, layout)
        cap = opts["per_class"]
        names: list[str] = []
        split_of: list[str] = []
        labels: list[int] = []
        for label, wnid in enumerate(wnids):
            files = train[wnid][:cap]
            g = make_generator(opts["seed"], self.name, "val", wnid)
            n_val = held_out(len(files), opts["val_fraction"]) if opts["val_from"] == "train" else 0
            val_index = set(torch.randperm(len(files), generator=g)[:n_val].tolist())
            for i, f in enumerate(files):
                names.append(f"train/{wnid}/{f}")
                split_of.append("val" if i in val_index else "train")
                labels.append(label)
            for f in val.get(wnid, [])[:cap]:
                names.append(f"val/{wnid}/{f}")
                split_of.append("test")
                labels.append(label)
        keys = [ann.image_key(n.split("/", 1)[0], n) for n in names]
        plan = Plan(opts, layout, wnids, names, keys, split_of, labels, [faces.boxes.get(k) for k in keys], faces,
                    skipped + skipped_val + len(loose) + len(loose_val))
        if opts["face_identities"] is not None:
            plan.identities = faces_io.plan_identities(opts["face_identities"], plan.layout.base, plan.keys,
                                                       plan.annotations)
        return plan

    def _classes(self, wanted: Any, train: Mapping[str, list[str]], layout: Layout) -> list[str]:
        available = sorted(train)
        if wanted is None:
            return available
        if isinstance(wanted, int):
            return available[:wanted]
        unknown = [w for w in wanted if w not in train]
        if unknown:
            raise BenchError(f"imagenet: option classes names {len(unknown)} wnid(s) with no images in "
                             f"{layout.images / 'train'} (e.g. {unknown[0]}); expected folders train/<wnid>/")
        return list(wanted)

    def _object_xml(self, plan: Plan) -> list[Path | None]:
        index = {s: ann.xml_index(plan.layout.boxes, s, plan.wnids) for s in ("train", "val")}
        return [index[n.split("/", 1)[0]].get(os.path.splitext(n.rsplit("/", 1)[-1])[0]) for n in plan.names]


def _build(sink: Any, plan: Plan, written: tuple[str, ...], files: list[Path],
           xml: list[Path | None]) -> dict[str, Any]:
    """Computes the object-area face fractions, then decodes the selection chunk by chunk into the sink.

    The localisation XML is read first, so that a malformed file fails before hours of decoding.
    """
    fractions: dict[str, list[float]] = {s: [] for s in written}
    with_objects = {s: 0 for s in written}
    for split, faces, path in zip(plan.split_of, plan.faces, xml):
        value = math.nan
        if path is not None:
            objects = ann.read_object_boxes(path)
            with_objects[split] += bool(len(objects))
            if faces is not None:
                value = ann.covered_fraction(objects, faces)
        fractions[split].append(value)
    counts = plan.face_counts()
    most = max(counts, default=0)
    sel = imageread.Selection(
        written, plan.names, plan.split_of, plan.labels,
        attrs={"faces": counts}, attr_names={"faces": [str(i) for i in range(max(most, 0) + 1)]},
        boxes=[ann.EMPTY if f is None else f for f in plan.faces])
    built = imageread.write_selection(sink, sel, iter(files), plan.opts["size"], with_crops=True, oriented=False)
    built["crops"] = torch.from_numpy(built["crops"].astype(np.int32))
    built["object_face_fraction"] = {s: torch.tensor(v, dtype=torch.float32) for s, v in fractions.items()}
    built["object_boxes"] = {"source": None if plan.layout.boxes is None else str(plan.layout.boxes),
                             "images": with_objects}
    return built


def _by_class(values: torch.Tensor, labels: torch.Tensor, wnids: list[str]) -> dict[str, float]:
    """Mean of the defined values per class (classes with none left out)."""
    out = {}
    defined = ~torch.isnan(values)
    for c in torch.unique(labels[defined]).tolist():
        out[wnids[c]] = float(values[defined & (labels == c)].double().mean())
    return out
