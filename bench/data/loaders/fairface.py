"""FairFace read from its official release: face crops labelled with gender, age and race.

Splits: ``train`` (``fairface_label_train.csv``) and ``test`` (``fairface_label_val.csv``,
the release's validation set). FairFace has no identities: labels are the running index
of an image within its split. Attributes keep the release's value names: ``gender``
(Male, Female), ``age`` (9 bins) and ``race`` (7 groups); an empty cell reads as -1.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Mapping

import torch

from bench.core.registry import register_dataset
from bench.data.base import (
    Dataset,
    ImageSet,
    Splits,
    SplitsSink,
    cached_sharded_splits,
    fingerprint,
    source_fingerprint,
)
from bench.data.loaders._loaders import check_options, decode_images, image_size, positive_int
from bench.data.stored_size import storage_size, survey
from bench.errors import BenchError

#: Bump when the decoded splits change for the same files and options.
FORMAT_VERSION = 1

ATTR_NAMES = {
    "gender": ["Male", "Female"],
    "age": ["0-2", "3-9", "10-19", "20-29", "30-39", "40-49", "50-59", "60-69", "more than 70"],
    "race": ["White", "Black", "Latino_Hispanic", "East Asian", "Southeast Asian", "Indian", "Middle Eastern"],
}
SPLIT_FILES = {"train": "fairface_label_train.csv", "test": "fairface_label_val.csv"}
DATA_DIRS = ("fairface", "FairFace", "")
IMAGE_DIRS = ("", "fairface-img-margin025-trainval", "fairface-img-margin125-trainval")
COLUMNS = ("file", "age", "gender", "race")
_OPTIONS = ("size", "max_images", "images")


def find_data_dir(root: Path) -> Path | None:
    """Returns the folder that holds both label CSVs, or None."""
    for sub in DATA_DIRS:
        base = root / sub if sub else root
        if all((base / name).is_file() for name in SPLIT_FILES.values()):
            return base
    return None


def find_image_dir(data_dir: Path) -> Path | None:
    """Returns the folder holding ``train/`` and ``val/`` (the CSVs' folder first), or None."""
    for sub in IMAGE_DIRS:
        base = data_dir / sub if sub else data_dir
        if (base / "train").is_dir() and (base / "val").is_dir():
            return base
    return None


def read_labels(path: Path, max_images: int | None = None) -> tuple[list[str], dict[str, list[int]]]:
    """Reads a FairFace label CSV.

    Args:
        path: ``fairface_label_train.csv`` or ``fairface_label_val.csv``.
        max_images: Keep only the first rows.

    Returns:
        The image paths relative to the release folder (``train/1.jpg``) and, per
        attribute, the value indices (-1 for an empty cell).

    Raises:
        BenchError: A column is missing or a value is not one of the release's names.
    """
    files: list[str] = []
    codes: dict[str, list[int]] = {name: [] for name in ATTR_NAMES}
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        missing = set(COLUMNS) - set(reader.fieldnames or ())
        if missing:
            absent = ", ".join(sorted(missing))
            raise BenchError(f"fairface: {path} lacks columns {absent} (expected {','.join(COLUMNS)})")
        for line, row in enumerate(reader, start=2):
            if max_images is not None and len(files) >= max_images:
                break
            files.append(row["file"].strip())
            for name, values in ATTR_NAMES.items():
                text = (row[name] or "").strip()
                if not text:
                    codes[name].append(-1)
                elif text in values:
                    codes[name].append(values.index(text))
                else:
                    raise BenchError(f"fairface: {path} line {line}: {name} {text!r} is not one of {', '.join(values)}")
    return files, codes


@register_dataset("fairface")
class FairFace(Dataset):
    """FairFace (Karkkainen and Joo, WACV 2021): faces balanced over race, gender and age.

    Options:
        size: Output side, or (h, w) (default: the images' own size, 224 in the padding=0.25
            release, so the mechanism runs on the released crops as they are).
        max_images: Keep the first images of each split (in CSV order).
        images: Folder holding ``train/`` and ``val/`` (default: next to the CSVs, else one
            of the release's ``fairface-img-margin025-trainval/`` or ``...margin125...``).
    """

    layout = (
        "<root>/fairface/ (or <root>/FairFace/, or <root>/ itself) holding fairface_label_train.csv "
        "and fairface_label_val.csv (file,age,gender,race,service_test) and the image folders "
        "train/ and val/ of the padding=0.25 or padding=1.25 release"
    )
    version = FORMAT_VERSION
    description = "FairFace face attributes (gender, 9 age bins, 7 race groups); train and val (as test)"

    def inspect(self, root: Path | None, options: Mapping[str, Any]) -> None:
        """Checks the label files and that every listed image exists (no decoding)."""
        self._index(root, options)

    def _index(self, root: Path | None, options: Mapping[str, Any]):
        """Returns (size, data dir, image dir, split -> (files, attribute codes)).

        Raises:
            BenchError: Bad options, missing label files or images.
        """
        check_options(self.name, options, _OPTIONS)
        size = image_size(options["size"], (224, 224)) if options.get("size") is not None else None
        max_images = positive_int(options, "max_images")
        if root is None:
            raise self.missing(root, "FairFace")
        root = Path(root)
        data_dir = find_data_dir(root)
        if data_dir is None:
            raise self.missing(root, " and ".join(SPLIT_FILES.values()))
        image_dir = Path(options["images"]) if options.get("images") else find_image_dir(data_dir)
        if image_dir is None or not image_dir.is_dir():
            raise self.missing(root, "image folders train/ and val/")

        labels = {split: read_labels(data_dir / name, max_images) for split, name in SPLIT_FILES.items()}
        sizes = {}
        for split, (files, _) in labels.items():
            sizes[split] = [_size(image_dir / f) for f in files]
            absent = [f for f, s in zip(files, sizes[split]) if s is None]
            if absent:
                what = f"{len(absent)} image(s) of {SPLIT_FILES[split]} (first {image_dir / absent[0]})"
                raise self.missing(root, what)
            if not files:
                raise self.missing(root, f"rows in {data_dir / SPLIT_FILES[split]}")
        if size is None:  # the images' own (smallest common) size, from their headers
            names = [f for files, _ in labels.values() for f in files]
            size = storage_size(survey((f, image_dir / f) for f in names).natives, names, None, False).size
        return size, data_dir, image_dir, labels

    def load(self, root: Path | None, options: Mapping[str, Any], cache_dir: Path) -> Splits:
        size, data_dir, image_dir, labels = self._index(root, options)
        csv_bytes = [(data_dir / name).read_bytes() for name in SPLIT_FILES.values()]
        selected = {split: files for split, (files, _) in labels.items()}
        fp = fingerprint(self.name, FORMAT_VERSION, csv_bytes, selected, size,
                         source_fingerprint([image_dir / f for files in selected.values() for f in files]))

        def build(sink: SplitsSink) -> dict[str, Any]:
            sets = {
                split: self._read_split(split, image_dir, files, codes, size) for split, (files, codes) in labels.items()
            }
            info = {
                "source": str(data_dir),
                "images_from": str(image_dir),
                "size": list(size),
                "images": {split: len(s) for split, s in sets.items()},
            }
            for split, images in sets.items():
                sink.put(split, images)
            return info

        sets, content, info = cached_sharded_splits(cache_dir, self.name, fp, build)
        return Splits(self.name, sets, content, synthetic=False, info=info)

    def _read_split(
        self, split: str, image_dir: Path, files: list[str], codes: dict[str, list[int]], size: tuple[int, int]
    ) -> ImageSet:
        return ImageSet(
            images=decode_images([image_dir / f for f in files], size, desc=f"fairface {split}"),
            labels=torch.arange(len(files), dtype=torch.int64),
            attrs={name: torch.tensor(values, dtype=torch.int64) for name, values in codes.items()},
            attr_names={name: list(values) for name, values in ATTR_NAMES.items()},
        )


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None
