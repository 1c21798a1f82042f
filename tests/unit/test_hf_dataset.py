"""The hf dataset on local Hugging Face datasets written here: save_to_disk folders and parquet files."""

from __future__ import annotations

import socket
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from bench.core.registry import datasets
from bench.data import imageread
from bench.data.loaders.hf import HuggingFace
from bench.errors import BenchError
from tests.fixtures.image_folders import png_bytes, solid

SIZE = 16


def colour(label: int) -> tuple[int, int, int]:
    return (20 * label + 10, 255 - 20 * label, (70 * label) % 256)


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """A DatasetDict saved to disk: person-disjoint train / validation / test, Image and ClassLabel features."""
    from datasets import ClassLabel, Dataset, DatasetDict, Features, Image, Sequence, Value

    features = Features({"photo": Image(), "identity": ClassLabel(names=[f"p{i}" for i in range(10)]),
                         "glasses": ClassLabel(names=["no", "yes"]), "age": Value("string"),
                         "face": Sequence(Sequence(Value("float32")))})

    def part(ids):
        rows = [(i, k) for i in ids for k in range(3)]
        return Dataset.from_dict({
            "photo": [{"bytes": png_bytes(colour(i)), "path": None} for i, _ in rows],
            "identity": [i for i, _ in rows],
            "glasses": [k % 2 for _, k in rows],
            "age": [None if k == 2 else ["old", "young"][i % 2] for i, k in rows],
            "face": [[[4.0, 2.0, 12.0, 10.0]] if k == 0 else [] for _, k in rows],
        }, features=features)

    path = tmp_path_factory.mktemp("hf") / "people"
    DatasetDict({"train": part(range(6)), "validation": part([6, 7]), "test": part([8, 9])}).save_to_disk(str(path))
    return path


@pytest.fixture(scope="module")
def parquet(tmp_path_factory) -> Path:
    """A hub-style parquet folder whose train and test share names: raw bytes, string labels."""
    root = tmp_path_factory.mktemp("hf") / "faces"
    (root / "data").mkdir(parents=True)
    for split, images in (("train", 4), ("test", 2)):
        names = [f"person{i}" for i in range(8) for _ in range(images)]
        table = pa.table({"img": [png_bytes(colour(int(n[-1]))) for n in names], "name": names})
        pq.write_table(table, root / "data" / f"{split}-00000-of-00001.parquet")
    (root / "README.md").write_text("a dataset card")
    return root


def opts(path: Path, **kw):
    return {"path": str(path), "size": SIZE, **kw}


def one_line(exc: pytest.ExceptionInfo) -> str:
    assert "\n" not in str(exc.value)
    return str(exc.value)


@pytest.fixture
def no_network(monkeypatch):
    """Fails any attempt to open a connection or resolve a name; the hub is set offline too."""
    def refuse(*args, **kwargs):
        raise AssertionError("network access attempted")

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


def test_registered_and_real():
    assert datasets.get("hf") is HuggingFace and not HuggingFace.synthetic


def test_save_to_disk_uses_its_own_disjoint_splits(saved, tmp_path, no_network):
    splits = HuggingFace().load(None, opts(saved, label_column="identity", attribute_columns="glasses,age",
                                           box_column="face"), tmp_path / "cache")
    assert "own splits" in splits.info["split"]
    assert {s: sorted(set(v.labels.tolist())) for s, v in splits.sets.items()} == \
        {"train": list(range(6)), "val": [6, 7], "test": [8, 9]}
    test = splits["test"]
    assert test.images.shape == (6, 3, SIZE, SIZE)
    for image, label in zip(test.images, test.labels.tolist()):
        assert image[:, 0, 0].tolist() == list(colour(label))
    assert test.attr_names == {"glasses": ["no", "yes"], "age": ["old", "young"]}
    assert test.attrs["glasses"].tolist() == [0, 1, 0] * 2 and test.attrs["age"].tolist() == [0, 0, -1, 1, 1, -1]
    assert test.boxes[0].tolist() == [[2.0, 2.0, 10.0, 10.0]] and test.boxes[1].shape == (0, 4)  # 20 x 16 -> crop 16
    assert splits.info["images"]["native"]["median"] == [16, 20] and splits.info["images"]["upscaled"] == 0


def test_parquet_folder_whose_splits_share_labels_is_split_by_label(parquet, tmp_path, no_network):
    splits = HuggingFace().load(None, opts(parquet, image_column="img", label_column="name"), tmp_path / "cache")
    assert "by label" in splits.info["split"] and "share 8 label(s)" in splits.info["split"]
    seen = {s: set(v.labels.tolist()) for s, v in splits.sets.items()}
    assert not (seen["train"] & seen["val"] or seen["train"] & seen["test"] or seen["val"] & seen["test"])
    assert sum(len(v) for v in splits.sets.values()) == 48 and all(seen.values())
    for images in splits.sets.values():  # every row of a label in one split, its image the label's colour
        assert torch.bincount(images.labels).max() == 6
        for image, label in zip(images.images, images.labels.tolist()):
            assert image[:, 0, 0].tolist() == list(colour(label))  # names person0.. sort as their numbers
    with pytest.raises(BenchError) as exc:
        HuggingFace().inspect(None, opts(parquet, image_column="img", label_column="name", split="dataset"))
    assert "share 8 label(s)" in one_line(exc) and "split=labels" in str(exc.value)


def test_own_splits_can_be_overridden_by_labels(saved):
    shape = HuggingFace().inspect(None, opts(saved, label_column="identity", split="labels"))
    assert sum(len(s.counts) for s in shape.values()) == 10 and all(c == 3 for s in shape.values() for c in s.counts)


@pytest.mark.parametrize("options, words", [
    ({"label_column": "identiy"}, ["no column 'identiy' (label_column)", "did you mean 'identity'", "columns: photo"]),
    ({"label_column": "identity", "attribute_columns": ["glases"]}, ["did you mean 'glasses'"]),
    ({"label_column": "identity", "image_column": "foto"}, ["did you mean 'photo'"]),
    ({"label_column": "identity", "split": "random"}, ["split must be auto, dataset or labels"]),
    ({"label_column": "identity", "colums": 1}, ["unknown option 'colums'"]),
    ({"label_column": "identity", "attribute_columns": ["face"]}, ["must hold categories"]),
])
def test_column_and_option_errors(saved, options, words):
    with pytest.raises(BenchError) as exc:
        HuggingFace().inspect(None, opts(saved, **options))
    assert all(w in one_line(exc) for w in words)


def test_missing_dataset_and_unnamed_image_column(parquet, tmp_path):
    for options, words in (({"path": None}, ["task.data.path=DIR"]),
                           ({"path": str(tmp_path / "nope")}, ["does not exist", "save_to_disk"]),
                           ({"path": str(tmp_path)}, ["no dataset files"]),
                           ({"path": str(parquet), "label_column": "name"},
                            ["image_column=NAME", "columns: img, name"])):
        with pytest.raises(BenchError) as exc:
            HuggingFace().inspect(None, options)
        assert all(w in one_line(exc) for w in words)


def test_inspect_decodes_nothing(saved, monkeypatch):
    monkeypatch.setattr(imageread, "read_image", lambda *a, **k: pytest.fail("inspect decoded an image"))
    shape = HuggingFace().inspect(None, opts(saved, label_column="identity"))
    assert [len(shape[s].counts) for s in ("train", "val", "test")] == [6, 2, 2]


def test_image_paths_are_read_and_keyed_by_their_files(tmp_path, monkeypatch, no_network):
    root = tmp_path / "ds"
    (root / "files").mkdir(parents=True)
    rows = []
    for i in range(6):
        for k in range(2):
            solid(colour(i), (16, 16)).save(root / "files" / f"{i}_{k}.png")
            rows.append((f"files/{i}_{k}.png", i))
    pq.write_table(pa.table({"file": [r[0] for r in rows], "label": [r[1] for r in rows]}), root / "all.parquet")
    options = opts(root / "all.parquet", image_column="file")
    first = HuggingFace().load(tmp_path, options, tmp_path / "cache")
    assert "no train and test splits" in first.info["split"] and sum(len(s) for s in first.sets.values()) == 12
    monkeypatch.setattr(imageread, "read_image", lambda *a, **k: pytest.fail("decoded again"))
    assert HuggingFace().load(tmp_path, options, tmp_path / "cache").fingerprint == first.fingerprint
    monkeypatch.undo()
    solid((0, 0, 0), (16, 16)).save(root / "files" / "0_0.png")
    changed = HuggingFace().load(tmp_path, options, tmp_path / "cache")
    assert changed.fingerprint != first.fingerprint
    # an Image struct that holds only paths (bytes null), found as the image column without metadata
    struct = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    cells = pa.array([{"bytes": None, "path": r[0]} for r in rows], type=struct)
    pq.write_table(pa.table({"image": cells, "label": [r[1] for r in rows]}), root / "structs.parquet")
    same = HuggingFace().load(tmp_path, opts(root / "structs.parquet"), tmp_path / "cache")
    assert same.fingerprint == changed.fingerprint


def test_coco_style_boxes_inside_a_struct(tmp_path):
    rows = [(i, k) for i in range(4) for k in range(2)]
    objects = [{"bbox": [[4.0, 2.0, 8.0, 8.0]] if k == 0 else []} for _, k in rows]
    table = pa.table({"image": pa.array([png_bytes(colour(i)) for i, _ in rows]), "label": [i for i, _ in rows],
                      "objects": objects})
    pq.write_table(table, tmp_path / "boxes.parquet")
    options = opts(tmp_path / "boxes.parquet", image_column="image", box_column="objects.bbox", box_format="xywh")
    splits = HuggingFace().load(None, options, tmp_path / "cache")
    boxes = [b.tolist() for s in splits.sets.values() for b in s.boxes]
    assert boxes.count([[2.0, 2.0, 10.0, 10.0]]) == 4 and boxes.count([]) == 4  # x 4, y 2, w 8, h 8; crop at x 2
    with pytest.raises(BenchError) as exc:
        HuggingFace().inspect(None, {**options, "box_column": "objects.box"})
    assert "has no field 'box'" in one_line(exc)


def test_public_rows_are_labels_in_no_split(parquet, tmp_path):
    options = opts(parquet, image_column="img", label_column="name", max_classes=4)
    splits = HuggingFace().load(None, options, tmp_path / "cache")
    public = HuggingFace().load_public(None, options, tmp_path / "cache")
    used = {lab for s in splits.sets.values() for lab in s.labels.tolist()}
    assert len(used) == 4 and len(public) == len(splits["train"]) and not set(public.labels.tolist()) & used
    assert HuggingFace().load_public(None, opts(parquet, image_column="img", label_column="name"),
                                     tmp_path / "cache") is None
