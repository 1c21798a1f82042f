"""A local Hugging Face dataset of labelled images for classification: the same classes in every split.

Read as the ``hf`` dataset reads it (a ``save_to_disk`` folder, or parquet / arrow files;
nothing reaches the hub), with the image, label and face-box columns named by options,
but split by image (:mod:`bench.data.imagesplit`): the dataset's own train / val /
test splits where it has train and val or test (their classes are expected to be shared),
else every class's rows split by a seeded, stratified permutation. The rule used is in the
data's ``info["split"]``; class names are the label column's strings, or its ``ClassLabel``
names for integers (plain integers are named by their value). Face boxes (``box_column``)
feed the face-only mechanisms; without them those mechanisms find faces with MTCNN.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from bench.core.registry import register_dataset
from bench.data import imageread
from bench.data.base import DataShape, ImageSet, Splits
from bench.data.classsplit import CLASS_SPLIT_ONLY, parse_options
from bench.data.hftables import SPLIT_WORDS, find_parts, read_columns
from bench.data.imagesplit import SPLIT_RULES, SPLITS, split_images
from bench.data.loaders.hf import DEFAULTS as HF_DEFAULTS
from bench.data.loaders.hf import HfIndex, HuggingFace, _locate, _row_name
from bench.data.loaders.labelled_folder import face_fraction, labelled_shape
from bench.errors import BenchError

DEFAULTS: dict[str, Any] = {**{k: v for k, v in HF_DEFAULTS.items() if k not in CLASS_SPLIT_ONLY}, "min_images": 3,
                            "split_fractions": (0.7, 0.1, 0.2)}


@dataclass
class LabelledIndex(HfIndex):
    """An :class:`~bench.data.loaders.hf.HfIndex` with the kept classes' names, in label order."""

    classes: list[str] = field(default_factory=list)


@register_dataset("labelled_hf")
class LabelledHf(HuggingFace):
    """A local Hugging Face dataset of labelled images, split by image (same classes in every split).

    Options:
        path: The dataset (required; ``--set task.data.path=DIR``): a save_to_disk
            folder, a folder of parquet / arrow files, or one such file.
        image_column: The image column (default: the one ``datasets.Image`` column).
        label_column: Class labels, integers or names (default ``label``).
        box_column: Face boxes per row (default none); ``box_format``: xyxy or xywh.
        attribute_columns: Categorical columns kept as attributes.
        split: ``auto`` (the dataset's own splits where it has train and val or test,
            else by image), ``dataset`` (its splits, or an error) or ``images``.
        split_fractions: Train / val / test fractions of each class's rows (default 0.7,
            0.1, 0.2; with own splits only val's share of train is used).
        size, min_images, seed, max_classes, per_class, grey: as ``labelled_folder``.
    """

    layout = ("a local Hugging Face dataset of labelled images under --set task.data.path=DIR: a save_to_disk "
              "folder (dataset_dict.json or state.json), or *.parquet / *.arrow files (split named by folder or prefix)")
    description = "a local Hugging Face dataset of labelled images (columns named by options), split by image"

    def inspect(self, root: Path | None, options: Mapping[str, Any]) -> DataShape:
        """Reads the label and box columns (no image); returns the splits' shapes with their faces."""
        return labelled_shape(self._index(root, options).selection)

    def load(self, root: Path | None, options: Mapping[str, Any], cache_dir: Path) -> Splits:
        """Decodes the selected rows' images into the cache once (or reads them from it).

        Raises:
            BenchError: Missing data, an unknown column, bad options, too few classes, or an
                image that cannot be read.
        """
        index = self._index(root, options)
        sets, content, built = self._decode(index, index.chosen, index.selection, cache_dir, "classify")
        info = {
            "source": str(index.base), "classes": index.classes, "split": index.how,
            "options": {k: (list(v) if isinstance(v, tuple) else v) for k, v in index.opts.items() if k != "path"},
            "n_images": {s: len(sets[s]) for s in SPLITS},
            "left_out_rows": len(index.labels) - len(index.chosen),
            **built,
        }
        if index.selection.boxes is not None:
            info["face_fraction"] = {s: face_fraction(sets[s]) for s in SPLITS}
        imageread.warn_about(self.name, info)
        return Splits(self.name, sets, content, synthetic=False, info=info)

    def load_public(self, root: Path | None, options: Mapping[str, Any], cache_dir: Path) -> ImageSet | None:
        """None: no rows are set apart as public."""
        return None

    def _index(self, root: Path | None, options: Mapping[str, Any]) -> LabelledIndex:
        opts = parse_options(self.name, options, DEFAULTS)
        if opts["box_format"] not in ("xyxy", "xywh"):
            raise BenchError(f"{self.name}: box_format must be xyxy or xywh, got {opts['box_format']!r}")
        if opts["split"] not in SPLIT_RULES:
            raise BenchError(f"{self.name}: split must be one of {', '.join(SPLIT_RULES)}, got {opts['split']!r}")
        base = _locate(opts["path"], root, self.layout)
        parts, features = find_parts(base)
        if not parts:
            raise BenchError(f"{self.name}: no dataset files (save_to_disk, *.parquet, *.arrow) under {base}; "
                             f"expected {self.layout}")
        cols = read_columns(parts, features, opts)
        rows = [(k, r) for k, p in enumerate(parts) for r in range(cols.rows[k])]
        own = [SPLIT_WORDS.get(parts[k].split.lower(), "") for k, _ in rows]
        split = split_images(own, cols.labels, opts, self.name)
        chosen = [i for i, s in enumerate(split.split_of) if s]
        sel = imageread.Selection(SPLITS, [_row_name(base, parts, rows[i]) for i in chosen],
                                  [split.split_of[i] for i in chosen], [split.labels[i] for i in chosen])
        for attr, (codes, names) in cols.attrs.items():
            sel.attrs[attr], sel.attr_names[attr] = [codes[i] for i in chosen], names
        if cols.boxes is not None:
            sel.boxes = [cols.boxes[i] for i in chosen]
        classes = [cols.label_names.get(c, str(c)) for c in split.classes]
        return LabelledIndex(opts, base, parts, cols.image_kind, rows, sel, chosen, cols.labels, split.how, classes)
