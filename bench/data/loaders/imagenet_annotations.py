"""The annotations the ``imagenet`` loader reads: the released face boxes and ILSVRC object boxes.

**Face boxes** (``face_annotations_ILSVRC.json``, the release of Yang et al., "A Study of
Face Obfuscation in ImageNet"): a JSON list of ``{"url": "train/<wnid>/<file>.JPEG" |
"val/<file>.JPEG", "bboxes": [{"x0": .., "y0": .., "x1": .., "y1": ..}, ...]}`` covering
ILSVRC-2012 train, val and test (test entries are read and ignored). Val urls name the
file without a class folder. Coordinates are pixels of the original image, in PIL's
convention (App. B, footnote 4): x to the right, y down, (x0, y0) the top-left and
(x1, y1) the bottom-right corner; the authors' ``experiments/blurring.py`` draws them
unscaled on the original image (``ImageDraw.rectangle``) and skips boxes with
``x0 >= x1`` or ``y0 >= y1``, which are dropped here too (and counted). An entry with an
empty ``bboxes`` list is an image annotated as having no face; an image without an entry
was not annotated (kept apart by the loader).

An image is keyed by its split and file stem (``train/n01440764_10026``,
``val/ILSVRC2012_val_00012978``): ILSVRC stems are unique within a split, and the key
matches files stored as ``.JPEG``, ``.jpg`` or under a class folder alike.

**Object boxes** (ILSVRC localisation, PASCAL VOC XML: ``<annotation><object><bndbox>
<xmin>..<ymin>..<xmax>..<ymax>``), in pixels of the same original image.
:func:`covered_fraction` gives the fraction of an image's object area (the union of its
object boxes) covered by the union of its face boxes: the per-image quantity behind the
paper's per-category analysis (Sec. 4, Fig. 4).
"""

from __future__ import annotations

import functools
import json
import math
import os
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.errors import BenchError

FACES_FILE = "face_annotations_ILSVRC.json"
ENTRY_FORMAT = ('{"url": "train/<wnid>/<file>.JPEG" | "val/<file>.JPEG", '
                '"bboxes": [{"x0": .., "y0": .., "x1": .., "y1": ..}, ...]}')
XML_FORMAT = "PASCAL VOC XML <annotation><object><bndbox><xmin>..<ymin>..<xmax>..<ymax>"
SPLIT_PREFIXES = ("train", "val", "test")
_CORNERS = ("x0", "y0", "x1", "y1")
EMPTY = np.zeros((0, 4), dtype=np.float32)
EMPTY.setflags(write=False)


def image_key(split: str, file_name: str) -> str:
    """Returns the key of an image: ``<split>/<stem>`` (``val/ILSVRC2012_val_00012978``)."""
    name = file_name.rsplit("/", 1)[-1]
    return f"{split}/{name.rsplit('.', 1)[0] if '.' in name else name}"


@dataclass
class FaceAnnotations:
    """The parsed face annotations.

    Attributes:
        path: The JSON file.
        boxes: Image key -> float32 [k, 4] (x0, y0, x1, y1) boxes in original pixels
            (degenerate boxes dropped; images without a face share :data:`EMPTY`).
        entries: Entries in the file.
        per_split: Split prefix -> entries of that split.
        dropped: Boxes dropped for x0 >= x1 or y0 >= y1.
        repeated: Entries whose url an earlier entry had (the later one wins, as in the
            authors' code).
        dropped_at: Image key -> positions in its entry's ``bboxes`` list of the boxes
            dropped (only images that had some).
    """

    path: Path
    boxes: dict[str, np.ndarray] = field(default_factory=dict)
    entries: int = 0
    per_split: dict[str, int] = field(default_factory=dict)
    dropped: int = 0
    repeated: int = 0
    dropped_at: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def listed(self, key: str) -> int:
        """Returns how many boxes the image's entry lists, dropped ones included (0 without an entry)."""
        return len(self.boxes[key]) + len(self.dropped_at.get(key, ())) if key in self.boxes else 0

    def kept_index(self, key: str, position: int) -> int | None:
        """Returns the row in ``boxes[key]`` of the box at ``position`` of the entry's list; None: it was dropped."""
        dropped = self.dropped_at.get(key, ())
        return None if position in dropped else position - sum(d < position for d in dropped)


class _Box(tuple):
    """A well-formed box object, made while the JSON is parsed."""


class _Entry:
    """A well-formed entry, made while the JSON is parsed (keeps the parsed list small)."""

    __slots__ = ("key", "split", "boxes", "dropped")

    def __init__(self, key: str, split: str, boxes: np.ndarray, dropped: tuple[int, ...]):
        self.key, self.split, self.boxes, self.dropped = key, split, boxes, dropped


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def url_key(url: Any) -> tuple[str, str] | None:
    """Returns (image key, split prefix) of an annotation url, or None when it is not one."""
    if not isinstance(url, str):
        return None
    parts = url.strip().strip("/").split("/")
    if parts[0] not in SPLIT_PREFIXES or len(parts) not in (2, 3) or not all(parts):
        return None
    return image_key(parts[0], parts[-1]), parts[0]


def _hook(obj: dict[str, Any]) -> Any:
    """Turns well-formed boxes and entries into compact objects; leaves anything else for the error pass."""
    if all(k in obj and _number(obj[k]) for k in _CORNERS):
        return _Box(float(obj[k]) for k in _CORNERS)
    boxes = obj.get("bboxes")
    if "url" in obj and isinstance(boxes, list) and all(isinstance(b, _Box) for b in boxes):
        found = url_key(obj["url"])
        if found is not None:
            good = [b[0] < b[2] and b[1] < b[3] for b in boxes]
            kept = [b for b, ok in zip(boxes, good) if ok]
            array = np.asarray(kept, dtype=np.float32).reshape(-1, 4) if kept else EMPTY
            dropped = tuple(j for j, ok in enumerate(good) if not ok)
            return _Entry(found[0], found[1], array, dropped)
    return obj


def _what_is_wrong(entry: Any) -> str:
    if not isinstance(entry, dict):
        return f"a {type(entry).__name__}, not an object"
    if "url" not in entry or "bboxes" not in entry:
        return "no \"url\" or no \"bboxes\""
    if url_key(entry["url"]) is None:
        return f"url {entry['url']!r} is not train/<wnid>/<file>, val/<file> or test/<file>"
    if not isinstance(entry["bboxes"], list):
        return "\"bboxes\" is not a list"
    for j, box in enumerate(entry["bboxes"]):
        if not isinstance(box, _Box):
            return (f"bbox {j} is not {{\"x0\", \"y0\", \"x1\", \"y1\"}} with finite numbers "
                    f"(got {json.dumps(box)[:80]})")
    return "malformed"


def read_face_annotations(path: Path) -> FaceAnnotations:
    """Reads and checks ``face_annotations_ILSVRC.json`` (cached per file, size and modification time).

    Raises:
        BenchError: The file cannot be read, is not JSON, not a list, or has a malformed
            entry; one line naming the entry's index and the expected format.
    """
    path = Path(path)
    try:
        st = path.stat()
    except OSError as exc:
        raise BenchError(f"imagenet: cannot read {path}: {exc.strerror or exc}") from None
    return _read_cached(str(path), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=1)
def _read_cached(path: str, size: int, mtime_ns: int) -> FaceAnnotations:
    where = f"imagenet: {path}"
    try:
        with open(path, "rb") as f:
            data = json.load(f, object_hook=_hook)
    except OSError as exc:
        raise BenchError(f"{where}: cannot read it: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        reason = " ".join(str(exc).split())
        raise BenchError(f"{where} is not JSON ({reason}); expected a list of {ENTRY_FORMAT}") from None
    if not isinstance(data, list):
        kind = "object" if isinstance(data, (dict, _Entry, _Box)) else type(data).__name__
        raise BenchError(f"{where} holds a JSON {kind}, not a list; expected a list of {ENTRY_FORMAT}")
    out = FaceAnnotations(Path(path), entries=len(data), per_split={s: 0 for s in SPLIT_PREFIXES})
    for index, entry in enumerate(data):
        if not isinstance(entry, _Entry):
            raise BenchError(f"{where}: entry {index} is malformed ({_what_is_wrong(entry)}); expected {ENTRY_FORMAT}")
        out.per_split[entry.split] += 1
        out.dropped += len(entry.dropped)
        if entry.split == "test":
            continue
        out.repeated += entry.key in out.boxes
        out.boxes[entry.key] = entry.boxes
        if entry.dropped:
            out.dropped_at[entry.key] = entry.dropped
        else:
            out.dropped_at.pop(entry.key, None)
    return out


def read_object_boxes(path: Path) -> np.ndarray:
    """Reads the object boxes of one ILSVRC localisation XML file.

    Returns:
        float64 [k, 4] (xmin, ymin, xmax, ymax) in original pixels, every ``<object>``'s box.

    Raises:
        BenchError: The file is not such XML or a coordinate is not a number (one line).
    """
    try:
        tree = ElementTree.parse(path)
    except (OSError, ElementTree.ParseError) as exc:
        raise BenchError(f"imagenet: {path} is not ILSVRC localisation XML ({' '.join(str(exc).split())}); "
                         f"expected {XML_FORMAT}") from None
    boxes = []
    for obj in tree.getroot().iter("object"):
        bndbox = obj.find("bndbox")
        if bndbox is None:
            continue
        try:
            boxes.append([float((bndbox.findtext(k) or "").strip()) for k in ("xmin", "ymin", "xmax", "ymax")])
        except ValueError:
            raise BenchError(f"imagenet: {path}: a <bndbox> coordinate is not a number; "
                             f"expected {XML_FORMAT}") from None
    return np.asarray(boxes, dtype=np.float64).reshape(-1, 4)


def xml_index(box_root: Path | None, split: str, wnids: list[str]) -> dict[str, Path]:
    """Lists the XML files of a split: stem -> file, from ``<box_root>/<split>/`` and its ``<wnid>/`` folders.

    Only the listed folders are read (no file is opened).
    """
    if box_root is None:
        return {}
    found: dict[str, Path] = {}
    for folder in [box_root / split, *[box_root / split / w for w in wnids]]:
        try:
            with os.scandir(folder) as it:
                for entry in it:
                    if entry.name.lower().endswith(".xml") and not entry.name.startswith("."):
                        found.setdefault(entry.name[:-4], Path(entry.path))
        except (FileNotFoundError, NotADirectoryError):
            continue
    return found


def covered_fraction(objects: np.ndarray, faces: np.ndarray) -> float:
    """Returns the fraction of the union of object boxes covered by the union of face boxes.

    Exact (areas over the grid the box edges make). NaN when there is no object box with
    an area.
    """
    objects = np.asarray(objects, dtype=np.float64).reshape(-1, 4)
    faces = np.asarray(faces, dtype=np.float64).reshape(-1, 4)
    objects = objects[(objects[:, 2] > objects[:, 0]) & (objects[:, 3] > objects[:, 1])]
    faces = faces[(faces[:, 2] > faces[:, 0]) & (faces[:, 3] > faces[:, 1])]
    if not len(objects):
        return math.nan
    if not len(faces):
        return 0.0
    both = np.concatenate([objects, faces])
    xs, ys = np.unique(both[:, 0::2]), np.unique(both[:, 1::2])
    cx, cy = (xs[:-1] + xs[1:]) / 2, (ys[:-1] + ys[1:]) / 2
    area = np.outer(np.diff(ys), np.diff(xs))

    def inside(boxes: np.ndarray) -> np.ndarray:
        cols = (cx >= boxes[:, :1]) & (cx < boxes[:, 2:3])
        rows = (cy >= boxes[:, 1:2]) & (cy < boxes[:, 3:4])
        return (rows[:, :, None] & cols[:, None, :]).any(0)

    in_object = inside(objects)
    total = float((area * in_object).sum())
    return float((area * (in_object & inside(faces))).sum()) / total
