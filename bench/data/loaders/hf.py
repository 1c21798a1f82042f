"""Any local Hugging Face ``datasets`` dataset: a ``save_to_disk`` folder, or parquet / arrow files.

Read with pyarrow, memory-mapped or column by column: nothing reaches the Hugging Face hub
(the ``datasets`` package is not even imported). Accepted under ``path``:

- a ``save_to_disk`` folder of a ``DatasetDict`` (``dataset_dict.json`` and one folder per
  split) or of a ``Dataset`` (``state.json``, one pool);
- a folder of ``*.parquet`` / ``*.arrow`` files (searched recursively), their split named
  by a folder or a file-name prefix as the hub lays them out (``data/train-00000-of-00002.parquet``,
  ``test/0000.parquet``; ``validation``, ``valid``, ``val`` and ``dev`` mean val); files
  naming no split form one pool;
- a single parquet or arrow file (one pool).

Columns are named by options: the image (a ``datasets.Image`` struct of bytes and path,
raw encoded bytes, or file paths), the label (integers or names: an identity for face
tasks, a class otherwise; a missing or negative label leaves the row out), attributes
(categories; -1 where missing) and face boxes (one ``[x1, y1, x2, y2]`` or a list of
them per row, in native pixels; ``box_format: xywh`` for COCO-style boxes; a dotted name
reaches into a struct, e.g. ``objects.bbox``). The dataset's own train / val / test
splits are used when their labels are disjoint (``split: auto``), otherwise the labels are
split class-disjointly as in :mod:`bench.data.loaders.folder`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import torch

from bench.core.registry import register_dataset
from bench.data import imageread
from bench.data import stored_size as storage
from bench.data.attribute_table import CODING_VERSION, labelled_in
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
from bench.data.hftables import SPLIT_WORDS, Part, all_embedded, find_parts, read_columns
from bench.errors import BenchError
from bench.randomness.seeding import make_generator

LOADER_VERSION = 3
"""2: images smaller than ``size`` are stored at their own size, not upscaled; one-channel data is stored grey.
3: stored at the images' own size by default (no profile cap); ``per_class``, ``test_classes``, ``min_test_classes``."""
DEFAULTS: dict[str, Any] = {"path": None, "image_column": None, "label_column": "label", "attribute_columns": [],
                            "box_column": None, "box_format": "xyxy", "split": "auto", **COMMON_DEFAULTS}


@dataclass
class HfIndex:
    """A dataset's rows, what the options select, and how to read the images (no image decoded)."""

    opts: dict[str, Any]
    base: Path
    parts: list[Part]
    image_kind: str
    rows: list[tuple[int, int]]
    selection: imageread.Selection
    chosen: list[int]
    labels: list[int | None]
    how: str


@register_dataset("hf")
class HuggingFace(Dataset):
    """A local Hugging Face dataset with its image, label, attribute and box columns named by options.

    Options:
        path: The dataset (required): a save_to_disk folder, a folder of parquet / arrow
            files, or one such file; relative paths are tried under the data root too.
        image_column: The image column (default: the one ``datasets.Image`` column).
        label_column: Identity or class labels (default ``label``).
        attribute_columns: Categorical columns kept as attributes (a list or ``a,b``).
        box_column: Face boxes per row (default none); ``box_format``: xyxy or xywh.
        split: ``auto`` (the dataset's train / val / test splits when it has train and
            test and their labels are disjoint, else by label), ``dataset`` (its splits, or
            an error) or ``labels``; with its own splits but no val, val classes are carved
            out of train as ``split_fractions`` says.
        size, min_images, split_fractions, seed, max_classes, per_class, test_classes,
            min_test_classes, grey: as ``folder`` (images are stored at their own size unless
            ``size`` caps it; one-channel data is stored grey; ``test_classes`` and
            ``min_test_classes`` apply where the split is by label, not the dataset's own).
    """

    layout = ("a local Hugging Face dataset under --set task.data.path=DIR: a save_to_disk folder "
              "(dataset_dict.json or state.json), or *.parquet / *.arrow files (split named by folder or prefix)")
    version = LOADER_VERSION
    description = "any local Hugging Face dataset (save_to_disk or parquet/arrow), columns named by options"

    def inspect(self, root: Path | None, options: Mapping[str, Any]) -> DataShape:
        """Reads the label, attribute and box columns and the images' headers; returns the splits' shapes."""
        index = self._index(root, options)
        sel = index.selection
        members = {s: [i for i, sp in enumerate(sel.split_of) if sp == s] for s in SPLITS}
        stored = self._storage(index, index.chosen, sel.names).size if sel.names else None
        return {s: replace(SplitShape.of_labels([sel.labels[i] for i in members[s]],
                                                labelled_in(sel.attrs, members[s])), stored=stored)
                for s in SPLITS}

    def load(self, root: Path | None, options: Mapping[str, Any], cache_dir: Path) -> Splits:
        """Decodes the selected rows' images into the cache once (or reads them from it).

        Raises:
            BenchError: Missing data, an unknown column (with the closest name), bad
                options, too few classes, or an image that cannot be read.
        """
        index = self._index(root, options)
        sets, content, built = self._decode(index, index.chosen, index.selection, cache_dir, "splits")
        info = {
            "source": str(index.base),
            "options": {k: (list(v) if isinstance(v, tuple) else v) for k, v in index.opts.items()},
            "split": index.how,
            "classes": {s: int(sets[s].labels.unique().numel()) for s in SPLITS},
            "n_images": {s: len(sets[s]) for s in SPLITS},
            "unlabelled_rows": sum(lab is None for lab in index.labels),
            **built,
        }
        imageread.warn_about(self.name, info)
        return Splits(self.name, sets, content, synthetic=False, info=info)

    def load_public(self, root: Path | None, options: Mapping[str, Any], cache_dir: Path) -> ImageSet | None:
        """Decodes public rows: labels in no split and unlabelled rows, never released; None when there are none."""
        index = self._index(root, options)
        used = set(index.selection.labels)
        pool = [i for i, lab in enumerate(index.labels) if lab is None or lab not in used]
        if not pool:
            return None
        g = make_generator(index.opts["seed"], "hf", "public")
        picked = torch.randperm(len(pool), generator=g)[: index.selection.count("train")]
        chosen = sorted(pool[i] for i in picked.tolist())
        names = [_row_name(index.base, index.parts, index.rows[i]) for i in chosen]
        sel = imageread.Selection(("train",), names, ["train"] * len(chosen),
                                  [-1 if index.labels[i] is None else index.labels[i] for i in chosen])
        fixed = self._storage(index, index.chosen, index.selection.names)
        sets, _, _ = self._decode(index, chosen, sel, cache_dir, "public", fixed)
        return sets["train"]

    def _decode(self, index: HfIndex, chosen: list[int], sel: imageread.Selection, cache_dir: Path, purpose: str,
                fixed: storage.Storage | None = None):
        """Decodes the chosen rows at the splits' storage (``fixed``, for public rows) or their own."""
        opts = sorted((k, v) for k, v in index.opts.items() if k != "path")
        opts += [("attribute coding", CODING_VERSION)] if index.opts["attribute_columns"] else []
        tables = [p.path for p in index.parts]
        listing = "\n".join(f"{s}\t{lab}\t{n}" for s, lab, n in zip(sel.split_of, sel.labels, sel.names))
        key = fingerprint(self.name, LOADER_VERSION, purpose, opts, listing, source_fingerprint(tables),
                          source_fingerprint(self._referenced(index, chosen)),
                          None if fixed is None else (fixed.size, fixed.grey))

        def build(sink) -> dict[str, Any]:
            stored = fixed or self._storage(index, chosen, sel.names)
            built = imageread.write_selection(sink, sel, self._sources(index, chosen, sel.names), stored.size,
                                              stored.grey)
            return {**built, "storage": stored.info(index.opts["size"])}

        return cached_sharded_splits(cache_dir, self.name, key, build)

    def _storage(self, index: HfIndex, chosen: Sequence[int], names: Sequence[str]) -> storage.Storage:
        """Surveys the chosen rows' image headers (no pixels) and returns the size and channels they are stored at."""
        return storage.resolve(zip(names, self._sources(index, chosen, names)), index.opts["size"], index.opts["grey"])

    # --- reading -------------------------------------------------------------------------------

    def _sources(self, index: HfIndex, chosen: Sequence[int], names: Sequence[str]) -> Iterator[bytes | Path]:
        """Yields the file or encoded bytes of each chosen row's image, in order (read lazily)."""
        return (self._source(index, value, name) for value, name in zip(self._values(index, chosen), names))

    def _values(self, index: HfIndex, chosen: Sequence[int]) -> Iterator[Any]:
        """Yields the image cell of each chosen row, in order, reading the column batch by batch."""
        by_part: dict[int, list[int]] = {}
        for i in chosen:
            part, row = index.rows[i]
            by_part.setdefault(part, []).append(row)
        top = index.opts["image_column"]
        for k, part in enumerate(index.parts):
            wanted = np.asarray(by_part.get(k, []), dtype=np.int64)
            start = 0
            for batch in (part.batches(top, imageread.CHUNK) if len(wanted) else ()):
                lo, hi = np.searchsorted(wanted, [start, start + len(batch)])
                for row in wanted[lo:hi]:
                    yield batch[int(row - start)].as_py()
                start += len(batch)

    def _source(self, index: HfIndex, value: Any, name: str) -> bytes | Path:
        if isinstance(value, dict):
            if value.get("bytes") is not None:
                return value["bytes"]
            value = value.get("path")
        if isinstance(value, (bytes, bytearray)):
            return bytes(value)
        if isinstance(value, str) and value:
            return self._resolve(index, value)
        raise BenchError(f"hf: row {name} has no image (column {index.opts['image_column']!r} is empty)")

    @staticmethod
    def _resolve(index: HfIndex, path: str) -> Path:
        candidate = Path(path).expanduser()
        folder = index.base if index.base.is_dir() else index.base.parent
        if candidate.is_absolute() or not (folder / candidate).exists():
            return candidate
        return folder / candidate

    def _referenced(self, index: HfIndex, chosen: Sequence[int]) -> list[Path]:
        """Image files the chosen rows point to (rows without embedded bytes), for the cache key."""
        column = index.opts["image_column"]
        if index.image_kind == "bytes" or (index.image_kind == "image" and all(all_embedded(p, column)
                                                                                for p in index.parts)):
            return []
        found = []
        for value in self._values(index, chosen):
            path = value.get("path") if isinstance(value, dict) and value.get("bytes") is None else value
            if isinstance(path, str) and path:
                found.append(self._resolve(index, path))
        return found

    def _index(self, root: Path | None, options: Mapping[str, Any]) -> HfIndex:
        opts = parse_options(self.name, options, DEFAULTS)
        if opts["box_format"] not in ("xyxy", "xywh"):
            raise BenchError(f"hf: box_format must be xyxy or xywh, got {opts['box_format']!r}")
        if opts["split"] not in ("auto", "dataset", "labels"):
            raise BenchError(f"hf: split must be auto, dataset or labels, got {opts['split']!r}")
        base = _locate(opts["path"], root, self.layout)
        parts, features = find_parts(base)
        if not parts:
            raise BenchError(f"hf: no dataset files (save_to_disk, *.parquet, *.arrow) under {base}; "
                             f"expected {self.layout}")
        cols = read_columns(parts, features, opts)
        rows = [(k, r) for k, p in enumerate(parts) for r in range(cols.rows[k])]
        own = [SPLIT_WORDS.get(parts[k].split.lower(), "") for k, _ in rows]
        split_of, how = _assign(own, _capped(cols.labels, opts), opts)
        chosen = [i for i, s in enumerate(split_of) if s]
        sel = imageread.Selection(SPLITS, [_row_name(base, parts, rows[i]) for i in chosen],
                                  [split_of[i] for i in chosen], [cols.labels[i] for i in chosen])  # type: ignore[misc]
        for attr, (codes, names) in cols.attrs.items():
            sel.attrs[attr], sel.attr_names[attr] = [codes[i] for i in chosen], names
        if cols.boxes is not None:
            sel.boxes = [cols.boxes[i] for i in chosen]
        return HfIndex(opts, base, parts, cols.image_kind, rows, sel, chosen, cols.labels, how)


def _capped(labels: list[int | None], opts: Mapping[str, Any]) -> list[int | None]:
    """Returns the labels with all but ``per_class`` rows of each label (a seeded choice) unlabelled: in no split."""
    if opts["per_class"] is None:
        return labels
    rows: dict[int, list[str]] = {}
    for i, lab in enumerate(labels):
        if lab is not None:
            rows.setdefault(lab, []).append(str(i))
    kept = {int(i) for members in cap_per_class(rows, opts["per_class"], opts["seed"], "hf").values() for i in members}
    return [lab if i in kept else None for i, lab in enumerate(labels)]


def _row_name(base: Path, parts: list[Part], where: tuple[int, int]) -> str:
    path = parts[where[0]].path
    return f"{path.relative_to(base).as_posix() if path != base else path.name}#{where[1]}"


def _locate(given: Any, data_root: Path | None, layout: str) -> Path:
    if given is None:
        raise BenchError(f"hf: no dataset given; set it with --set task.data.path=DIR ({layout})")
    path = Path(str(given)).expanduser()
    if not path.is_absolute() and not path.exists() and data_root is not None and (Path(data_root) / path).exists():
        path = Path(data_root) / path
    if not path.exists():
        raise BenchError(f"hf: the dataset {path} does not exist; expected {layout}")
    return path.resolve()


def _assign(own: list[str], labels: list[int | None], opts: Mapping[str, Any]) -> tuple[list[str], str]:
    """Assigns each row a split ("" for none) and says how."""
    present = {s for s in own if s}
    by_split = {s: {lab for lab, o in zip(labels, own) if o == s and lab is not None} for s in present}
    shared = sorted({lab for a in by_split for b in by_split if a < b for lab in by_split[a] & by_split[b]})
    usable = {"train", "test"} <= present
    if opts["split"] == "dataset" and (not usable or shared):
        why = (f"its splits share {len(shared)} label(s) (e.g. {shared[0]})" if shared and usable
               else f"it has no train and test splits (found: {', '.join(sorted(present)) or 'none'})")
        raise BenchError(f"hf: split=dataset, but {why}; use split=labels to split by label")
    if opts["split"] != "labels" and usable and not shared:
        return _own_splits(own, labels, opts), "the dataset's own splits (label-disjoint)"
    counts: dict[int, int] = {}
    for lab in labels:
        if lab is not None:
            counts[lab] = counts.get(lab, 0) + 1
    groups = split_classes(counts, opts, "hf")
    split_of = {lab: s for s, labs in groups.items() for lab in labs}
    why = ("split=labels" if opts["split"] == "labels" else f"its splits share {len(shared)} label(s)" if shared
           else "the dataset has no train and test splits")
    return [split_of.get(lab, "") if lab is not None else "" for lab in labels], f"class-disjoint by label ({why})"


def _own_splits(own: list[str], labels: list[int | None], opts: Mapping[str, Any]) -> list[str]:
    counts: dict[tuple[str, int], int] = {}
    for o, lab in zip(own, labels):
        if o and lab is not None:
            counts[(o, lab)] = counts.get((o, lab), 0) + 1
    eligible = sorted(k for k, n in counts.items() if n >= opts["min_images"])
    order = torch.randperm(len(eligible), generator=make_generator(opts["seed"], "hf", "classes")).tolist()
    kept = {eligible[i] for i in order[: opts["max_classes"]]}
    if "val" not in {o for o, _ in kept}:  # carve val classes out of train, as split_fractions says
        train = sorted(lab for o, lab in kept if o == "train")
        f = opts["split_fractions"]
        n_val = min(max(1, round(len(train) * f[1] / max(f[0] + f[1], 1e-9))), len(train) - 1) if f[1] > 0 else 0
        pick = torch.randperm(len(train), generator=make_generator(opts["seed"], "hf", "val")).tolist()[:n_val]
        moved = {train[i] for i in pick}
        kept = {("val" if o == "train" and lab in moved else o, lab) for o, lab in kept}
        own = ["val" if o == "train" and lab in moved else o for o, lab in zip(own, labels)]
    return [o if (o, lab) in kept else "" for o, lab in zip(own, labels)]
