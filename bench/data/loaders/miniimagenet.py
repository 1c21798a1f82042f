"""MiniImageNet (Vinyals et al.) in the split of Ravi and Larochelle, for few-shot classification.

100 ImageNet classes x 600 images, split 64 / 16 / 20 classes into ``train.csv``,
``val.csv`` and ``test.csv`` (header ``filename,label``: an image file and its WordNet id)
with the images in ``images/`` (``images/<label>/<filename>`` is accepted as well).
Images are fitted to ``size`` (84 x 84 in the paper) by :mod:`bench.data.imageread`:
a centre crop to the square, then an antialiased resize (the usual release is 84 x 84
already). Labels index the sorted WordNet ids of all three files.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Mapping

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
from bench.data.classsplit import SPLITS, parse_options
from bench.errors import BenchError

LOADER_VERSION = 1
BASES = ("miniimagenet", "mini-imagenet", "miniImageNet", "mini_imagenet", "MiniImageNet", "")
PAPER_CLASSES = {"train": 64, "val": 16, "test": 20}
DEFAULTS: dict[str, Any] = {"size": 84, "per_class": None, "grey": False}


def find_base(root: Path) -> Path | None:
    """Returns the folder holding the three CSVs and ``images/``, or None."""
    for sub in BASES:
        base = root / sub if sub else root
        if all((base / f"{s}.csv").is_file() for s in SPLITS) and (base / "images").is_dir():
            return base
    return None


def read_csv(path: Path) -> list[tuple[str, str]]:
    """Reads a ``filename,label`` CSV.

    Raises:
        BenchError: The header is not ``filename,label`` or a row has not two fields.
    """
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            rows = [[c.strip() for c in row] for row in csv.reader(f)]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise BenchError(f"miniimagenet: cannot read {path} ({type(exc).__name__}: {exc})") from None
    if not rows or [c.lower() for c in rows[0][:2]] != ["filename", "label"]:
        raise BenchError(f"miniimagenet: {path}: the first line must be the header filename,label")
    out = []
    for line, cells in enumerate(rows[1:], start=2):
        if not any(cells):
            continue
        if len(cells) != 2 or not all(cells):
            raise BenchError(f"miniimagenet: {path}:{line}: expected filename,label, got {','.join(cells)}")
        out.append((cells[0], cells[1]))
    return out


@register_dataset("miniimagenet")
class MiniImageNet(Dataset):
    """MiniImageNet, Ravi and Larochelle's 64 / 16 / 20-class split.

    Options:
        size: Stored side, or [height, width] (default 84, as the paper).
        per_class: Keep the first images of each class (in CSV order; default all 600).
        grey: Store one grey channel (default false).
    """

    layout = ("<root>/miniimagenet/ (or mini-imagenet/, miniImageNet/, <root>/) holding train.csv, val.csv, "
              "test.csv (filename,label; Ravi & Larochelle) and images/<filename>")
    version = LOADER_VERSION
    description = "MiniImageNet (84 x 84), Ravi & Larochelle's 64/16/20 class split"

    def inspect(self, root: Path | None, options: Mapping[str, Any]) -> DataShape:
        """Reads the CSVs and checks every listed image exists (none is opened); returns the splits' shapes."""
        _, _, rows = self._index(root, options)
        return {s: SplitShape.of_labels([label for _, label in rows[s]]) for s in SPLITS}

    def load(self, root: Path | None, options: Mapping[str, Any], cache_dir: Path) -> Splits:
        """Decodes the listed images into the cache once (or reads them from it).

        Raises:
            BenchError: The layout is missing, a CSV is malformed, an image is missing or
                cannot be read.
        """
        opts, base, rows = self._index(root, options)
        classes = sorted({label for s in SPLITS for _, label in rows[s]})
        index = {c: i for i, c in enumerate(classes)}
        sel = imageread.Selection(SPLITS, [str(p.relative_to(base)) for s in SPLITS for p, _ in rows[s]],
                                  [s for s in SPLITS for _ in rows[s]],
                                  [index[label] for s in SPLITS for _, label in rows[s]])
        files = [p for s in SPLITS for p, _ in rows[s]]
        csvs = [fingerprint((base / f"{s}.csv").read_bytes()) for s in SPLITS]
        key = fingerprint(self.name, LOADER_VERSION, sorted((k, str(v)) for k, v in opts.items()), csvs, sel.names,
                          source_fingerprint(files))

        def build(sink) -> dict[str, Any]:
            return imageread.write_selection(sink, sel, files, opts["size"], opts["grey"])

        sets, content, built = cached_sharded_splits(cache_dir, self.name, key, build)
        counts = {s: len({label for _, label in rows[s]}) for s in SPLITS}
        info = {
            "source": str(base),
            "options": {k: (list(v) if isinstance(v, tuple) else v) for k, v in opts.items()},
            "classes": counts,
            "paper_split": counts == PAPER_CLASSES,
            "n_images": {s: len(sets[s]) for s in SPLITS},
            "class_names": {s: sorted({label for _, label in rows[s]}) for s in SPLITS},
            **built,
        }
        imageread.warn_about(self.name, info)
        return Splits(self.name, sets, content, synthetic=False, info=info)

    def _index(self, root: Path | None, options: Mapping[str, Any]):
        """Returns (options, base folder, split -> [(image file, WordNet id)]).

        Raises:
            BenchError: Missing layout or images, a malformed CSV, or a class in two splits.
        """
        opts = parse_options(self.name, options, DEFAULTS)
        if root is None or not Path(root).is_dir():
            raise self.missing(root, "the MiniImageNet folder")
        base = find_base(Path(root))
        if base is None:
            raise self.missing(root, "train.csv, val.csv, test.csv and images/")
        rows: dict[str, list[tuple[Path, str]]] = {}
        owner: dict[str, str] = {}
        for split in SPLITS:
            taken: dict[str, int] = {}
            rows[split] = []
            for name, label in read_csv(base / f"{split}.csv"):
                if owner.setdefault(label, split) != split:
                    raise BenchError(f"miniimagenet: class {label} is in both {owner[label]}.csv and {split}.csv")
                taken[label] = taken.get(label, 0) + 1
                if opts["per_class"] is None or taken[label] <= opts["per_class"]:
                    rows[split].append((_image(base, name, label), label))
            if not rows[split]:
                raise self.missing(root, f"rows in {base / f'{split}.csv'}")
        missing = [p for s in SPLITS for p, _ in rows[s] if not p.is_file()]
        if missing:
            raise self.missing(root, f"{len(missing)} listed image(s) (first {missing[0]})")
        return opts, base, rows


def _image(base: Path, name: str, label: str) -> Path:
    flat = base / "images" / name
    nested = base / "images" / label / name
    return nested if not flat.exists() and nested.exists() else flat
