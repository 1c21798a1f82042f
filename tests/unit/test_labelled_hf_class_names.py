"""A labelled Hugging Face dataset names its classes by their strings (issue 44): a column of names by the
names, integers of a ``ClassLabel`` by its names (from save_to_disk metadata or a parquet file's own), plain
integers by their value; and its shape counts the images with face boxes (for ``face_detect``'s plan check)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.data.imagesplit import SPLITS
from bench.data.loaders.labelled_hf import LabelledHf
from tests.fixtures.image_folders import png_bytes

OPTS = {"image_column": "img", "label_column": "kind", "size": 8}


def write_parquet(path: Path, labels: list, **columns) -> Path:
    """Writes one parquet file of solid images (distinct colours) with the given labels and extra columns."""
    path.parent.mkdir(parents=True, exist_ok=True)
    cells = [png_bytes((10 * i % 256, 7 * i % 256, 90), size=(8, 8)) for i in range(len(labels))]
    pq.write_table(pa.table({"img": cells, "kind": labels, **columns}), path)
    return path


@pytest.mark.parametrize("labels, classes", [
    (["zebra", "ant", "moth"], ["ant", "moth", "zebra"]),  # names: by name, in sorted order as labelled
    ([7, 3, 12], ["3", "7", "12"]),  # plain integers keep their value
])
def test_a_label_column_names_its_classes_in_the_data_info(tmp_path, labels, classes):
    path = write_parquet(tmp_path / "data.parquet", [k for k in labels for _ in range(5)])
    splits = LabelledHf().load(None, {**OPTS, "path": str(path)}, tmp_path / "cache")
    assert splits.info["classes"] == classes
    assert sorted(set(splits["train"].labels.tolist())) == [0, 1, 2]


def test_a_parquet_file_s_own_class_label_names_its_integer_classes(tmp_path):
    from datasets import ClassLabel, Dataset, Features, Value

    features = Features({"img": Value("binary"), "kind": ClassLabel(names=["cat", "dog", "eel"])})
    rows = [c for c in (2, 0, 1) for _ in range(5)]
    Dataset.from_dict({"img": [png_bytes((40 * c + i, 90, 30), size=(8, 8)) for i, c in enumerate(rows)],
                       "kind": rows}, features=features).to_parquet(str(tmp_path / "pets.parquet"))
    splits = LabelledHf().load(None, {**OPTS, "path": str(tmp_path / "pets.parquet")}, tmp_path / "cache")
    assert splits.info["classes"] == ["cat", "dog", "eel"]


def test_the_shape_counts_the_images_with_a_face_box(tmp_path):
    labels = [k for k in ("a", "b") for _ in range(10)]
    boxes = [[[0.0, 0.0, 4.0, 4.0]] if i % 2 else [] for i in range(len(labels))]
    path = write_parquet(tmp_path / "boxed.parquet", labels, faces=boxes)
    shape = LabelledHf().inspect(None, {**OPTS, "path": str(path), "box_column": "faces"})
    assert sum(shape[s].faces for s in SPLITS) == 10 and shape["test"].images == 4
    plain = LabelledHf().inspect(None, {**OPTS, "path": str(path)})
    assert [plain[s].faces for s in SPLITS] == [0, 0, 0]
