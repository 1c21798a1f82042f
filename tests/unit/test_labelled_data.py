"""labelled_folder and labelled_hf: classification data split by image, own splits read, boxes.csv, the record."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml
from PIL import Image

from bench.data.imagesplit import SPLITS
from bench.data.loaders.labelled_folder import LabelledFolder
from bench.data.loaders.labelled_hf import LabelledHf
from bench.errors import BenchError
from tests.fixtures.image_folders import png_bytes

ROOT = Path(__file__).resolve().parents[2]


def write_classes(root: Path, classes: int = 3, per_class: int = 10, seed: int = 0, side: int = 12) -> Path:
    """Writes ROOT/class_<c>/<i>.png: random colour images (distinct bytes), ``per_class`` a class."""
    rng = np.random.default_rng(seed)
    for c in range(classes):
        folder = root / f"class_{c}"
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8)).save(folder / f"{i:03d}.png")
    return root


def test_a_flat_folder_is_split_by_image_stratified_seeded_and_recorded(tmp_path):
    root = write_classes(tmp_path / "objects")
    splits = LabelledFolder().load(None, {"root": str(root), "size": 16}, tmp_path / "cache")
    assert splits.info["classes"] == ["class_0", "class_1", "class_2"]
    assert [len(splits[s]) for s in SPLITS] == [21, 3, 6]  # 10 a class: 7 / 1 / 2
    for name in SPLITS:
        assert sorted(splits[name].labels.tolist()) == sorted([0, 1, 2] * (len(splits[name]) // 3))
    assert "stratified by class, seed 0, fractions 0.7, 0.1, 0.2" in splits.info["split"]
    seen = [img.numpy().tobytes() for s in SPLITS for img in splits[s].images]
    assert len(set(seen)) == len(seen) == 30
    again = LabelledFolder().load(None, {"root": str(root), "size": 16}, tmp_path / "other")
    assert again.fingerprint == splits.fingerprint
    other = LabelledFolder().load(None, {"root": str(root), "size": 16, "seed": 1}, tmp_path / "cache")
    assert other.fingerprint != splits.fingerprint
    shape = LabelledFolder().inspect(None, {"root": str(root)})
    assert {s: len(shape[s].counts) for s in SPLITS} == {"train": 3, "val": 3, "test": 3}


def test_own_train_and_val_folders_are_read_val_tested_and_val_carved_from_train(tmp_path):
    root = tmp_path / "imagenet_like"
    write_classes(root / "train", per_class=10, seed=1)
    write_classes(root / "val", per_class=4, seed=2)
    splits = LabelledFolder().load(None, {"root": str(root), "size": 16}, tmp_path / "cache")
    assert "own train / val splits (val is the test split" in splits.info["split"]
    assert [len(splits[s]) for s in SPLITS] == [27, 3, 12]  # train's 10 a class: 9 / 1; val's 4 are the test
    with_test = tmp_path / "three"
    for name, n, seed in (("train", 6, 3), ("val", 2, 4), ("test", 3, 5)):
        write_classes(with_test / name, per_class=n, seed=seed)
    splits = LabelledFolder().load(None, {"root": str(with_test), "size": 16}, tmp_path / "cache")
    assert splits.info["split"] == "the data's own train / val / test splits"
    assert [len(splits[s]) for s in SPLITS] == [18, 6, 9]
    with pytest.raises(BenchError, match="split=dataset, but the data has no train"):
        LabelledFolder().inspect(None, {"root": str(write_classes(tmp_path / "flat")), "split": "dataset"})


def test_boxes_csv_feeds_face_boxes_and_the_face_fraction(tmp_path):
    root = write_classes(tmp_path / "people", per_class=5, side=20)
    rows = ["file,x1,y1,x2,y2"]
    for path in sorted(root.rglob("*.png")):
        name = path.relative_to(root).as_posix()
        rows.append(f"{name},0,0,10,10" if path.stem == "000" else name)  # one face in each class's first image
    (root / "boxes.csv").write_text("\n".join(rows) + "\n")
    splits = LabelledFolder().load(None, {"root": str(root), "size": 20}, tmp_path / "cache")
    fractions = [f for s in SPLITS for f in splits.info["face_fraction"][s]]
    assert sorted(fractions) == [0.0] * 12 + [0.25] * 3
    assert sum(len(b) for s in SPLITS for b in splits[s].boxes) == 3
    (root / "boxes.csv").write_text("\n".join(rows[:-1]) + "\n")
    with pytest.raises(BenchError, match="not listed"):
        LabelledFolder().inspect(None, {"root": str(root)})


def test_too_few_classes_and_bad_options_are_one_line(tmp_path):
    root = write_classes(tmp_path / "two", classes=2, per_class=3)
    with pytest.raises(BenchError, match="min_images=5 train images"):
        LabelledFolder().inspect(None, {"root": str(root), "min_images": 5})
    with pytest.raises(BenchError, match="split must be one of auto, dataset, images"):
        LabelledFolder().inspect(None, {"root": str(root), "split": "people"})
    with pytest.raises(BenchError, match="does not exist"):
        LabelledFolder().inspect(None, {"root": str(tmp_path / "nope")})


def test_a_parquet_dataset_with_shared_classes_keeps_its_own_splits(tmp_path):
    root = tmp_path / "hub" / "data"
    root.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", 8), ("test", 3)):
        names = [f"kind{c}" for c in range(3) for _ in range(n)]
        cells = [png_bytes(tuple(int(v) for v in rng.integers(0, 256, 3))) for _ in names]
        pq.write_table(pa.table({"img": cells, "kind": names}), root / f"{split}-00000-of-00001.parquet")
    opts = {"path": str(root.parent), "image_column": "img", "label_column": "kind", "size": 16}
    splits = LabelledHf().load(None, opts, tmp_path / "cache")
    assert splits.info["split"] == "the data's own train / test splits (val carved out of train)"
    assert [len(splits[s]) for s in SPLITS] == [21, 3, 9]
    assert sorted(set(splits["test"].labels.tolist())) == [0, 1, 2] and len(splits.info["classes"]) == 3
    mixed = LabelledHf().load(None, {**opts, "split": "images"}, tmp_path / "cache")
    assert "stratified by class" in mixed.info["split"] and [len(mixed[s]) for s in SPLITS] == [24, 3, 6]  # 11 a class: 8 / 1 / 2


def test_a_save_to_disk_dataset_names_its_classes_and_boxes_reach_the_images(tmp_path):
    from datasets import ClassLabel, Dataset, Features, Sequence, Value
    from datasets import Image as HfImage

    features = Features({"image": HfImage(), "label": ClassLabel(names=["cat", "dog"]),
                         "faces": Sequence(Sequence(Value("float32")))})
    rows = [(c, k) for c in range(2) for k in range(6)]
    Dataset.from_dict({"image": [{"bytes": png_bytes((40 * c + 7 * k, 90, 30)), "path": None} for c, k in rows],
                       "label": [c for c, _ in rows], "faces": [[[0.0, 0.0, 8.0, 8.0]] for _ in rows]},
                      features=features).save_to_disk(str(tmp_path / "pets"))
    splits = LabelledHf().load(None, {"path": str(tmp_path / "pets"), "box_column": "faces", "size": 16},
                               tmp_path / "cache")
    assert splits.info["classes"] == ["cat", "dog"]
    assert all(len(b) == 1 for s in SPLITS for b in splits[s].boxes)
    assert all(f > 0 for s in SPLITS for f in splits.info["face_fraction"][s])


@pytest.mark.parametrize("source", ["folder", "hf"])
def test_transfer_presets_train_the_classify_models(source):
    classify = yaml.safe_load((ROOT / f"tasks/presets/classify_{source}.yaml").read_text())
    transfer = yaml.safe_load((ROOT / f"tasks/presets/transfer_{source}.yaml").read_text())
    for profile in ("defaults", "smoke", "quick", "paper"):
        for key in ("data", "arch", "weights", "input_size", "schedule", "processes", "backend"):
            assert classify[profile].get(key) == transfer[profile].get(key), (source, profile, key)


def test_labels_are_contiguous_over_the_kept_classes(tmp_path):
    root = write_classes(tmp_path / "objects", classes=4, per_class=6)
    splits = LabelledFolder().load(None, {"root": str(root), "size": 16, "max_classes": 2}, tmp_path / "cache")
    assert splits.info["classes"] == ["class_0", "class_1"]
    assert torch.cat([splits[s].labels for s in SPLITS]).unique().tolist() == [0, 1]
