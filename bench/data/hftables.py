"""The table files of a local Hugging Face dataset, read with pyarrow (no hub, no ``datasets`` import).

:func:`find_parts` finds the files and the split each belongs to; :func:`read_columns`
checks the named columns in every file and reads and codes the label, attribute and box
columns (the image column is streamed later by :class:`Part.batches`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from bench.data.attribute_table import code_attribute
from bench.errors import BenchError

SPLIT_WORDS = {"train": "train", "training": "train", "validation": "val", "valid": "val", "val": "val",
               "dev": "val", "test": "test", "testing": "test"}
_SPLIT_PART = re.compile(r"(?:^|[-._ ])(train|training|validation|valid|val|dev|test|testing)(?=$|[-._ \d])",
                         re.IGNORECASE)
"""A split word as the hub's data-file patterns find it: delimited, in a folder or file name."""


@dataclass
class Part:
    """One table file of the dataset.

    Attributes:
        path: The file.
        kind: ``arrow`` (IPC stream or file) or ``parquet``.
        split: The split it belongs to as the dataset names it ("" for none).
    """

    path: Path
    kind: str
    split: str
    _table: Any = field(default=None, repr=False)

    def schema(self) -> Any:
        """The arrow schema."""
        import pyarrow.parquet as pq

        return pq.read_schema(self.path) if self.kind == "parquet" else self.table().schema

    def table(self, columns: Sequence[str] | None = None) -> Any:
        """Reads the named top-level columns (all for arrow files, which are memory-mapped)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self.kind == "parquet":
            return pq.read_table(self.path, columns=list(columns) if columns is not None else None)
        if self._table is None:
            source = pa.memory_map(str(self.path))
            try:
                self._table = pa.ipc.open_stream(source).read_all()
            except pa.ArrowInvalid:
                self._table = pa.ipc.open_file(pa.memory_map(str(self.path))).read_all()
        return self._table

    def batches(self, column: str, size: int) -> Iterator[Any]:
        """Yields one top-level column ``size`` rows at a time."""
        import pyarrow.parquet as pq

        if self.kind == "parquet":
            for batch in pq.ParquetFile(self.path).iter_batches(batch_size=size, columns=[column]):
                yield batch.column(0)
        else:
            values = self.table().column(column)
            for start in range(0, len(values), size):
                yield values.slice(start, size).combine_chunks()


def find_parts(path: Path) -> tuple[list[Part], dict[str, Any]]:
    """Finds the table files of a local dataset and its features (from its metadata).

    Raises:
        BenchError: No table file under ``path``, or a file whose split is ambiguous.
    """
    def features_of(info: Path) -> dict[str, Any]:
        try:
            return json.loads(info.read_text()).get("features") or {} if info.is_file() else {}
        except (OSError, ValueError) as exc:
            raise BenchError(f"hf: cannot read {info}: {exc}") from None

    def saved(folder: Path, split: str) -> list[Part]:
        try:
            files = [f["filename"] for f in json.loads((folder / "state.json").read_text())["_data_files"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise BenchError(f"hf: {folder / 'state.json'} is not a save_to_disk state ({exc})") from None
        return [Part(folder / f, "arrow", split) for f in files]

    if path.is_file():
        return [Part(path, "parquet" if path.suffix == ".parquet" else "arrow", "")], {}
    if (path / "dataset_dict.json").is_file():
        try:
            names = json.loads((path / "dataset_dict.json").read_text())["splits"]
        except (OSError, ValueError, KeyError) as exc:
            raise BenchError(f"hf: cannot read {path / 'dataset_dict.json'}: {exc}") from None
        parts = [p for name in names for p in saved(path / name, name)]
        return parts, features_of(path / names[0] / "dataset_info.json") if names else {}
    if (path / "state.json").is_file():
        return saved(path, ""), features_of(path / "dataset_info.json")
    files = sorted(p for p in path.rglob("*") if p.suffix in (".parquet", ".arrow") and p.is_file()
                   and not p.name.startswith("cache-")  # datasets' map() caches, not data
                   and not any(s.startswith(".") for s in p.relative_to(path).parts))
    parts = []
    for file in files:
        named = [m.group(1).lower() for s in file.relative_to(path).parts if (m := _SPLIT_PART.search(s))]
        parts.append(Part(file, file.suffix[1:], named[-1] if named else ""))
    if {p.split for p in parts} - {""} and "" in {p.split for p in parts}:
        odd = next(p for p in parts if not p.split)
        raise BenchError(f"hf: {odd.path} names no split (train, validation or test) while other files do")
    return parts, {}


def column(table: Any, name: str) -> Any:
    """Returns a (possibly dotted: ``objects.bbox``) column of a table as one arrow array.

    Raises:
        BenchError: A dotted name whose part is not a field of a struct column.
    """
    import pyarrow as pa

    top, *rest = name.split(".")
    values = table.column(top).combine_chunks()
    for sub in rest:
        if not pa.types.is_struct(values.type) or values.type.get_field_index(sub) < 0:
            raise BenchError(f"hf: column {name!r}: {values.type} has no field {sub!r}")
        values = values.field(sub)
    return values


@dataclass
class Columns:
    """The non-image columns of every row (parts in order), coded.

    Attributes:
        rows: Rows of each part.
        image_kind: ``image`` (a datasets.Image struct), ``bytes`` or ``paths``.
        labels: Each row's label (None: unlabelled).
        attrs: Attribute -> (each row's code, the codes' names).
        boxes: Each row's float [k, 4] boxes (x1, y1, x2, y2), or None.
        label_names: Label -> its name: the string of a column of names, or a ``ClassLabel``
            feature's name of an integer; empty for plain integers (named by their value).
    """

    rows: list[int]
    image_kind: str
    labels: list[int | None]
    attrs: dict[str, tuple[list[int], list[str]]]
    boxes: list[np.ndarray] | None
    label_names: dict[int, str] = field(default_factory=dict)


def read_columns(parts: list[Part], features: Mapping[str, Any], opts: dict[str, Any]) -> Columns:
    """Checks the named columns in every file and reads all but the image (fills ``image_column``).

    Raises:
        BenchError: A missing column (with the closest name), or values of the wrong kind.
    """
    from bench.core.config import did_you_mean

    schemas = [p.schema() for p in parts]
    features = dict(features or _features(schemas[0]))
    if opts["image_column"] is None:
        found = [f.name for f in schemas[0] if (features.get(f.name) or {}).get("_type") == "Image"
                 or (not features and _image_kind(f.type, f.name, strict=False) == "image")]
        if len(found) != 1:
            raise BenchError(f"hf: name the image column with --set task.data.image_column=NAME "
                             f"(columns: {', '.join(schemas[0].names)})")
        opts["image_column"] = found[0]
    attrs = opts["attribute_columns"]
    attrs = [a.strip() for a in attrs.split(",") if a.strip()] if isinstance(attrs, str) else list(attrs or [])
    opts["attribute_columns"] = attrs
    named = [("image_column", opts["image_column"]), ("label_column", opts["label_column"]),
             *[("attribute_columns", a) for a in attrs], ("box_column", opts["box_column"])]
    for p, schema in zip(parts, schemas):
        for option, name in named:
            if name is not None and str(name).split(".")[0] not in schema.names:
                raise BenchError(f"hf: no column {name!r} ({option}) in {p.path}{did_you_mean(name, schema.names)} "
                                 f"(columns: {', '.join(schema.names)})")
    kind = _image_kind(schemas[0].field(opts["image_column"]).type, opts["image_column"])
    tops = sorted({str(n).split(".")[0] for n in [opts["label_column"], *attrs, opts["box_column"]] if n})
    cells: dict[str, list[Any]] = {}
    rows = []
    for p in parts:
        table = p.table(tops)
        rows.append(table.num_rows)
        for name in [opts["label_column"], *attrs, *([opts["box_column"]] if opts["box_column"] else [])]:
            cells.setdefault(name, []).extend(column(table, name).to_pylist())
    label = opts["label_column"]
    labels, label_names = _labels(cells[label], label, features.get(label))
    coded = {a: _categories(cells[a], a, features.get(a)) for a in attrs}
    boxes = None
    if opts["box_column"]:
        boxes = [_boxes(v, opts["box_format"], opts["box_column"], i) for i, v in enumerate(cells[opts["box_column"]])]
    return Columns(rows, kind, labels, coded, boxes, label_names)


def _features(schema: Any) -> dict[str, Any]:
    raw = (schema.metadata or {}).get(b"huggingface")
    try:
        return json.loads(raw)["info"]["features"] if raw else {}
    except (ValueError, KeyError, TypeError):
        return {}


def _image_kind(arrow_type: Any, name: str, strict: bool = True) -> str | None:
    import pyarrow as pa

    if pa.types.is_struct(arrow_type) and arrow_type.get_field_index("bytes") >= 0:
        return "image"
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return "bytes"
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return "paths"
    if not strict:
        return None
    raise BenchError(f"hf: image column {name!r} holds {arrow_type}; expected a datasets.Image, encoded bytes or "
                     "file paths")


def _labels(values: list[Any], name: str, feature: Any) -> tuple[list[int | None], dict[int, str]]:
    """Codes a label column: integers as they are (named by a ``ClassLabel`` feature's names), names by sorted order."""
    present = [v for v in values if v is not None and v != ""]
    if all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        names = feature.get("names") if isinstance(feature, dict) and feature.get("_type") == "ClassLabel" else None
        return [v if v is not None and v >= 0 else None for v in values], dict(enumerate(map(str, names or ())))
    if all(isinstance(v, str) for v in present):
        index = {v: i for i, v in enumerate(sorted(set(present)))}
        return [index.get(v) if v else None for v in values], {i: v for v, i in index.items()}
    bad = next(v for v in present if not isinstance(v, (int, str)) or isinstance(v, bool))
    raise BenchError(f"hf: label column {name!r} must hold integers or names, got {type(bad).__name__} {bad!r}")


def _categories(values: list[Any], name: str, feature: Any) -> tuple[list[int], list[str]]:
    if isinstance(feature, dict) and feature.get("_type") == "ClassLabel" and feature.get("names"):
        names = [str(n) for n in feature["names"]]
        return [v if isinstance(v, int) and 0 <= v < len(names) else -1 for v in values], names
    bad = next((v for v in values if v is not None and not isinstance(v, (int, str, bool))), None)
    if bad is not None:
        raise BenchError(f"hf: attribute column {name!r} must hold categories (integers, names), got "
                         f"{type(bad).__name__} {bad!r}")
    return code_attribute(name, values)


def _boxes(value: Any, fmt: str, name: str, row: int) -> np.ndarray:
    if value is None:
        return np.zeros((0, 4))
    try:
        boxes = np.asarray(value, dtype=np.float64).reshape(-1, 4) if len(value) else np.zeros((0, 4))
    except (TypeError, ValueError):
        raise BenchError(f"hf: box column {name!r}, row {row}: expected [x1, y1, x2, y2] or a list of them, "
                         f"got {value!r}") from None
    if fmt == "xywh":
        boxes = np.concatenate([boxes[:, :2], boxes[:, :2] + boxes[:, 2:]], 1)
    if not np.isfinite(boxes).all() or (boxes[:, 2] <= boxes[:, 0]).any() or (boxes[:, 3] <= boxes[:, 1]).any():
        raise BenchError(f"hf: box column {name!r}, row {row}: a box needs x1 < x2 and y1 < y2 ({fmt}), got {value!r}")
    return boxes


def all_embedded(part: Part, image_column: str) -> bool:
    """Whether every row of a part embeds its image bytes (from parquet statistics when it can)."""
    if part.kind == "parquet":
        import pyarrow.parquet as pq

        meta = pq.ParquetFile(part.path).metadata
        counts = []
        for g in range(meta.num_row_groups):
            for c in range(meta.num_columns):
                chunk = meta.row_group(g).column(c)
                if chunk.path_in_schema == f"{image_column}.bytes":
                    counts.append(chunk.statistics.null_count if chunk.statistics is not None else None)
        if counts and None not in counts:
            return sum(counts) == 0
    return column(part.table([image_column]), image_column).field("bytes").null_count == 0


