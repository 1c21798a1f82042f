"""Market-1501 read from its official layout, with the identity attributes of Lin et al.

Splits follow the standard protocol (as torchreid reads it):

- ``train``: ``bounding_box_train/`` without junk (pid -1) or distractor (pid 0000)
  images; labels are the pids relabelled 0..K-1 in increasing pid order (K = 751).
- ``query``: ``query/``; labels are the original pids.
- ``gallery``: ``bounding_box_test/``; labels are the original pids, junk images keep
  pid -1 and distractors pid 0, for :func:`tasks.reid_metrics.evaluate_rank` to ignore
  and to count as wrong matches respectively.

``cams`` holds 0-based camera ids. Attributes ``gender`` (male, female) and ``age``
(young, teenager, adult, old) come from ``market_attribute.mat`` (the release of Lin et
al., "Improving person re-identification by attribute and identity learning") or from a
``market_attribute.csv`` with columns ``pid,gender,age``; they are per identity, mapped
to every image of the identity, -1 where an identity has no annotation.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from bench.core.registry import register_dataset
from bench.data.base import (
    Dataset,
    DataShape,
    ImageSet,
    Splits,
    SplitShape,
    SplitsSink,
    cached_sharded_splits,
    fingerprint,
    source_fingerprint,
)
from bench.data.loaders._loaders import check_options, decode_images, person_size, positive_int
from bench.errors import BenchError

#: Bump when the decoded splits change for the same files and options.
FORMAT_VERSION = 1

SPLIT_DIRS = {"train": "bounding_box_train", "query": "query", "gallery": "bounding_box_test"}
DATA_DIRS = ("Market-1501-v15.09.15", "market1501/Market-1501-v15.09.15", "market1501", "")
ATTRIBUTE_DIRS = ("", "attribute", "Market-1501_Attribute")
ATTRIBUTE_FILES = ("market_attribute.mat", "market_attribute.csv")

JUNK_PID = -1
DISTRACTOR_PID = 0
GENDERS = ["male", "female"]
AGES = ["young", "teenager", "adult", "old"]

_NAME = re.compile(r"^(-1|\d+)_c(\d)s(\d+)_(\d+)_(\d+)\.jpg$", re.IGNORECASE)
_OPTIONS = ("size", "max_classes", "per_class", "attributes")


@dataclass(frozen=True)
class MarketImage:
    """One image file of the layout.

    Attributes:
        path: The file.
        pid: Person id (-1 junk, 0 distractor).
        cam: Camera id, 0-based.
        seq: Sequence id within the camera.
    """

    path: Path
    pid: int
    cam: int
    seq: int


def parse_name(name: str) -> tuple[int, int, int]:
    """Parses an image name ``PPPP_cCsS_FFFFFF_NN.jpg``.

    Args:
        name: File name without folders, e.g. ``0002_c1s1_000451_03.jpg``.

    Returns:
        (pid, camera, sequence), camera 0-based.

    Raises:
        ValueError: The name does not follow the pattern, or pid / camera are out of range.
    """
    m = _NAME.match(name)
    if m is None:
        raise ValueError(f"image name {name!r} does not match PPPP_cCsS_FFFFFF_NN.jpg")
    pid, cam, seq = int(m.group(1)), int(m.group(2)), int(m.group(3))
    if not -1 <= pid <= 1501 or not 1 <= cam <= 6:
        raise ValueError(f"image name {name!r}: pid must be -1..1501 and camera 1..6")
    return pid, cam - 1, seq


def find_data_dir(root: Path) -> Path | None:
    """Returns the folder that holds the three split folders, or None."""
    for sub in DATA_DIRS:
        base = root / sub if sub else root
        if all((base / d).is_dir() for d in SPLIT_DIRS.values()):
            return base
    return None


def list_split(folder: Path) -> list[MarketImage]:
    """Lists the ``.jpg`` images of a split folder in name order (hidden files, such as macOS's ``._*``, skipped).

    Raises:
        BenchError: A file name does not follow the Market-1501 pattern.
    """
    images = []
    for path in sorted(p for p in folder.iterdir() if p.suffix.lower() == ".jpg" and not p.name.startswith(".")):
        try:
            pid, cam, seq = parse_name(path.name)
        except ValueError as exc:
            raise BenchError(f"market1501: {exc} (in {folder})") from None
        images.append(MarketImage(path, pid, cam, seq))
    return images


def find_attribute_file(data_dir: Path, root: Path) -> Path | None:
    """Returns the attribute annotation next to the data (``.mat`` preferred), or None."""
    bases = [data_dir] if root == data_dir else [data_dir, root]
    for name in ATTRIBUTE_FILES:
        for base in bases:
            for sub in ATTRIBUTE_DIRS:
                path = (base / sub if sub else base) / name
                if path.is_file():
                    return path
    return None


def read_attributes(path: Path) -> dict[int, tuple[int, int]]:
    """Reads per-identity (gender, age) codes, 0-based (-1 where unlabelled).

    ``.mat``: the struct ``market_attribute`` with substructs ``train`` and ``test``, each
    holding 1-based codes (gender 1 male, 2 female; age 1 young .. 4 old) in row vectors
    aligned with the cell array ``image_index`` of pid strings. ``.csv``: columns
    ``pid,gender,age`` with the same codes or the names (``male``, ``adult``, ...).

    Raises:
        BenchError: The file cannot be read or does not have this structure.
    """
    try:
        if path.suffix.lower() == ".mat":
            return _read_attribute_mat(path)
        return _read_attribute_csv(path)
    except BenchError:
        raise
    except Exception as exc:
        raise BenchError(f"market1501: cannot read attributes from {path}: {type(exc).__name__}: {exc}") from None


def _read_attribute_mat(path: Path) -> dict[int, tuple[int, int]]:
    import scipy.io

    mat = scipy.io.loadmat(str(path), squeeze_me=True, struct_as_record=False)
    if "market_attribute" not in mat:
        raise BenchError(f"market1501: {path} has no struct 'market_attribute'")
    table: dict[int, tuple[int, int]] = {}
    for part in ("train", "test"):
        sub = getattr(mat["market_attribute"], part, None)
        if sub is None:
            raise BenchError(f"market1501: {path}: market_attribute has no field {part!r}")
        pids = [int(str(p).strip()) for p in np.atleast_1d(sub.image_index)]
        gender = np.atleast_1d(sub.gender).astype(np.int64)
        age = np.atleast_1d(sub.age).astype(np.int64)
        if not len(pids) == len(gender) == len(age):
            raise BenchError(f"market1501: {path}: {part} fields image_index, gender, age differ in length")
        for pid, g, a in zip(pids, gender.tolist(), age.tolist()):
            table[pid] = (_code(g, len(GENDERS)), _code(a, len(AGES)))
    return table


def _read_attribute_csv(path: Path) -> dict[int, tuple[int, int]]:
    table: dict[int, tuple[int, int]] = {}
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        missing = {"pid", "gender", "age"} - set(reader.fieldnames or ())
        if missing:
            raise BenchError(f"market1501: {path} lacks columns {', '.join(sorted(missing))} (expected pid,gender,age)")
        for line, row in enumerate(reader, start=2):
            try:
                pid = int(row["pid"])
                table[pid] = (_value(row["gender"], GENDERS), _value(row["age"], AGES))
            except ValueError as exc:
                raise BenchError(f"market1501: {path} line {line}: {exc}") from None
    return table


def _code(value: int, count: int) -> int:
    return value - 1 if 1 <= value <= count else -1


def _value(text: str | None, names: list[str]) -> int:
    text = (text or "").strip().lower()
    if not text:
        return -1
    if text in names:
        return names.index(text)
    if text.isdigit() and 1 <= int(text) <= len(names):
        return int(text) - 1
    raise ValueError(f"{text!r} is not one of {', '.join(names)} (or 1..{len(names)})")


@register_dataset("market1501")
class Market1501(Dataset):
    """Market-1501 (Zheng et al., ICCV 2015): 1,501 pedestrians seen by 6 cameras.

    Options:
        size: Output (h, w) (default (128, 64), the native size); one int is the height of
            a 2:1 crop.
        max_classes: Keep the first identities (in pid order) of train and of the test set;
            the gallery keeps junk and distractors in proportion (the name every loader uses).
        per_class: Keep the first images (in name order) of each identity in every split.
        attributes: Path of the attribute file (default: searched next to the data).
    """

    layout = (
        "<root>/Market-1501-v15.09.15/ (or <root>/market1501/, or <root>/ itself) holding "
        "bounding_box_train/, query/, bounding_box_test/ of PPPP_cCsS_FFFFFF_NN.jpg images, "
        "optionally market_attribute.mat (Lin et al.) or market_attribute.csv (pid,gender,age)"
    )
    version = FORMAT_VERSION
    description = "Market-1501 person re-identification (751 train / 750 test identities, 6 cameras)"

    def inspect(self, root: Path | None, options: Mapping[str, Any]) -> DataShape:
        """Lists the images (no decoding) and returns each split's identities, their image counts and cameras."""
        _, _, attr_path, selected = self._select(root, options)
        labelled = ("gender", "age") if attr_path else ()
        shape = {}
        for split, images in selected.items():
            people = [im for im in images if im.pid not in (JUNK_PID, DISTRACTOR_PID)]
            shape[split] = SplitShape.of_labels([im.pid for im in people], labelled, [im.cam for im in people])
        return shape

    def _select(self, root: Path | None, options: Mapping[str, Any]):
        """Returns (size, data dir, attribute file or None, split -> selected images).

        Raises:
            BenchError: Bad options or missing files.
        """
        check_options(self.name, options, _OPTIONS)
        size = person_size(options.get("size"), (128, 64))
        max_ids = positive_int(options, "max_classes")
        per_id = positive_int(options, "per_class")
        if root is None:
            raise self.missing(root, "Market-1501")
        root = Path(root)
        data_dir = find_data_dir(root)
        if data_dir is None:
            raise self.missing(root, "bounding_box_train/, query/ and bounding_box_test/")
        listing = {split: list_split(data_dir / folder) for split, folder in SPLIT_DIRS.items()}
        for split, images in listing.items():
            if not images:
                raise self.missing(root, f"images in {data_dir / SPLIT_DIRS[split]}")

        attr_path = Path(options["attributes"]) if options.get("attributes") else find_attribute_file(data_dir, root)
        if options.get("attributes") and not attr_path.is_file():
            raise self.missing(root, f"attribute file {attr_path}")
        return size, data_dir, attr_path, select(listing, max_ids, per_id)

    def load(self, root: Path | None, options: Mapping[str, Any], cache_dir: Path) -> Splits:
        size, data_dir, attr_path, selected = self._select(root, options)
        files = [(s, im.path.name) for s, ims in selected.items() for im in ims]
        attr_id = (attr_path.name, attr_path.read_bytes()) if attr_path else None
        sources = source_fingerprint([im.path for ims in selected.values() for im in ims])
        fp = fingerprint(self.name, FORMAT_VERSION, files, attr_id, size, sources)

        def build(sink: SplitsSink) -> dict[str, Any]:
            table = read_attributes(attr_path) if attr_path else None
            sets = {split: self._read_split(split, images, size, table) for split, images in selected.items()}
            info = {
                "source": str(data_dir),
                "size": list(size),
                "attributes": str(attr_path) if attr_path else "none found",
                "images": {split: len(s) for split, s in sets.items()},
                "identities": {
                    split: len({im.pid for im in images} - {JUNK_PID, DISTRACTOR_PID})
                    for split, images in selected.items()
                },
            }
            for split, images in sets.items():
                sink.put(split, images)
            return info

        sets, content, info = cached_sharded_splits(cache_dir, self.name, fp, build)
        return Splits(self.name, sets, content, synthetic=False, info=info)

    def _read_split(
        self, split: str, images: list[MarketImage], size: tuple[int, int], table: dict[int, tuple[int, int]] | None
    ) -> ImageSet:
        pids = torch.tensor([im.pid for im in images], dtype=torch.int64)
        if split == "train":
            labels = torch.searchsorted(torch.unique(pids), pids)
        else:
            labels = pids
        attrs: dict[str, torch.Tensor] = {}
        attr_names: dict[str, list[str]] = {}
        if table is not None:
            codes = torch.tensor([table.get(im.pid, (-1, -1)) for im in images], dtype=torch.int64).reshape(-1, 2)
            attrs = {"gender": codes[:, 0].clone(), "age": codes[:, 1].clone()}
            attr_names = {"gender": list(GENDERS), "age": list(AGES)}
        return ImageSet(
            images=decode_images([im.path for im in images], size, desc=f"market1501 {split}"),
            labels=labels,
            attrs=attrs,
            attr_names=attr_names,
            cams=torch.tensor([im.cam for im in images], dtype=torch.int64),
        )


def select(
    listing: Mapping[str, list[MarketImage]], max_ids: int | None, per_id: int | None
) -> dict[str, list[MarketImage]]:
    """Applies the protocol's exclusions and the size caps to the listed images.

    Train drops junk and distractors. ``max_ids`` keeps the first train identities and
    the first test identities (those of the query split, in pid order); ``per_id`` keeps
    each identity's first images. The gallery keeps junk and distractor images in the
    proportion in which its identity images were kept, evenly spread.
    """
    train = [im for im in listing["train"] if im.pid not in (JUNK_PID, DISTRACTOR_PID)]
    out = {"train": _cap(train, _first_ids(train, max_ids), per_id)}
    test_ids = _first_ids(listing["query"], max_ids)
    out["query"] = _cap(listing["query"], test_ids, per_id)
    gallery = listing["gallery"]
    people = [im for im in gallery if im.pid not in (JUNK_PID, DISTRACTOR_PID)]
    kept = _cap(people, test_ids, per_id)
    fraction = len(kept) / max(len(people), 1)
    others = []
    for pid in (JUNK_PID, DISTRACTOR_PID):
        group = [im for im in gallery if im.pid == pid]
        others += _spread(group, round(fraction * len(group)))
    out["gallery"] = sorted(kept + others, key=lambda im: im.path.name)
    return out


def _first_ids(images: list[MarketImage], max_ids: int | None) -> set[int] | None:
    if max_ids is None:
        return None
    return set(sorted({im.pid for im in images})[:max_ids])


def _cap(images: list[MarketImage], ids: set[int] | None, per_id: int | None) -> list[MarketImage]:
    seen: dict[int, int] = {}
    out = []
    for im in images:
        if ids is not None and im.pid not in ids:
            continue
        seen[im.pid] = seen.get(im.pid, 0) + 1
        if per_id is None or seen[im.pid] <= per_id:
            out.append(im)
    return out


def _spread(images: list[MarketImage], count: int) -> list[MarketImage]:
    if count >= len(images):
        return list(images)
    if count <= 0:
        return []
    index = np.linspace(0, len(images) - 1, count).round().astype(int)
    return [images[i] for i in index]
