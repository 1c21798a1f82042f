"""FairFace loader: CSV parsing, attribute names, splits, sizes, errors, caching."""

from __future__ import annotations

import pytest
import torch
from fixtures.reid_fixtures import (
    FAIRFACE_AGES,
    FAIRFACE_GENDERS,
    FAIRFACE_RACES,
    fairface_colour,
    fairface_rows,
    write_fairface,
)

import bench.data.loaders.fairface as fairface
from bench.core.registry import datasets
from bench.data.loaders.fairface import ATTR_NAMES, FairFace
from bench.errors import BenchError


def load(root, cache, **options):
    return FairFace().load(root, options, cache)


def test_registered_and_names_as_released():
    assert datasets.get("fairface") is FairFace
    assert ATTR_NAMES == {"gender": list(FAIRFACE_GENDERS), "age": list(FAIRFACE_AGES), "race": list(FAIRFACE_RACES)}


@pytest.mark.parametrize("subdir", ["fairface", "FairFace", ""])
def test_splits_labels_and_attributes(tmp_path, subdir):
    write_fairface(tmp_path, subdir=subdir, n_train=7, n_val=4)
    splits = load(tmp_path, tmp_path / "cache")
    assert set(splits.sets) == {"train", "test"} and not splits.synthetic
    for split, csv_split, count in (("train", "train", 7), ("test", "val", 4)):
        s = splits[split]
        assert s.images.shape == (count, 3, 56, 56) and s.images.dtype == torch.uint8  # the images' own size
        assert s.labels.tolist() == list(range(count))
        assert s.cams is None and s.boxes is None
        assert s.attr_names == ATTR_NAMES
        for i, row in enumerate(fairface_rows(csv_split, count)):
            for name in ("gender", "age", "race"):
                assert ATTR_NAMES[name][int(s.attrs[name][i])] == row[name]


def test_images_match_their_rows(tmp_path):
    write_fairface(tmp_path, side=56)
    test = load(tmp_path, tmp_path / "cache", size=28)["test"]
    assert test.images.shape[1:] == (3, 28, 28)
    for i, image in enumerate(test.images):
        expected = torch.tensor(fairface_colour("val", i), dtype=torch.float32)
        assert (image.float().mean((1, 2)) - expected).abs().max() < 4


def test_size_pair_and_max_images(tmp_path):
    write_fairface(tmp_path, n_train=9, n_val=5)
    splits = load(tmp_path, tmp_path / "cache", size=[40, 30], max_images=3)
    assert splits["train"].images.shape == (3, 3, 40, 30)
    assert len(splits["test"]) == 3
    assert splits.info["images"] == {"train": 3, "test": 3}


def test_images_in_the_release_subfolder(tmp_path):
    base = write_fairface(tmp_path)
    sub = base / "fairface-img-margin025-trainval"
    sub.mkdir()
    for name in ("train", "val"):
        (base / name).rename(sub / name)
    splits = load(tmp_path, tmp_path / "cache")
    assert splits.info["images_from"] == str(sub)
    assert len(splits["train"]) == 7


def test_empty_cell_reads_as_missing_and_unknown_value_fails(tmp_path):
    base = write_fairface(tmp_path, n_train=2, n_val=2)
    path = base / "fairface_label_val.csv"
    lines = path.read_text().splitlines()
    lines[1] = "val/1.jpg,,Male,White,True"
    path.write_text("\n".join(lines) + "\n")
    assert load(tmp_path, tmp_path / "cache")["test"].attrs["age"][0] == -1
    lines[1] = "val/1.jpg,3-9,Robot,White,True"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(BenchError, match="line 2: gender 'Robot'"):
        load(tmp_path, tmp_path / "cache")


def test_missing_column(tmp_path):
    base = write_fairface(tmp_path)
    (base / "fairface_label_train.csv").write_text("file,age,gender\ntrain/1.jpg,3-9,Male\n")
    with pytest.raises(BenchError, match="lacks columns race"):
        load(tmp_path, tmp_path / "cache")


def one_line_layout_error(exc_info):
    message = str(exc_info.value)
    assert "\n" not in message and message.startswith("fairface:")
    assert "fairface_label_train.csv and fairface_label_val.csv" in message and "train/ and val/" in message
    return message


def test_missing_data(tmp_path):
    with pytest.raises(BenchError) as exc:
        load(None, tmp_path / "cache")
    one_line_layout_error(exc)
    with pytest.raises(BenchError) as exc:
        load(tmp_path / "empty", tmp_path / "cache")
    one_line_layout_error(exc)
    base = write_fairface(tmp_path / "noimages")
    (base / "val" / "2.jpg").unlink()
    with pytest.raises(BenchError) as exc:
        load(tmp_path / "noimages", tmp_path / "cache")
    assert "val/2.jpg" in one_line_layout_error(exc)
    for p in (base / "val").iterdir():
        p.unlink()
    (base / "val").rmdir()
    with pytest.raises(BenchError) as exc:
        load(tmp_path / "noimages", tmp_path / "cache")
    assert "image folders" in one_line_layout_error(exc)


def test_bad_options(tmp_path):
    write_fairface(tmp_path)
    with pytest.raises(BenchError, match="unknown option"):
        load(tmp_path, tmp_path / "cache", max_ids=3)
    with pytest.raises(BenchError, match="max_images"):
        load(tmp_path, tmp_path / "cache", max_images=-1)


def test_cache_is_used_and_keyed_by_content(tmp_path, monkeypatch):
    base = write_fairface(tmp_path)
    first = load(tmp_path, tmp_path / "cache")
    assert len(list((tmp_path / "cache" / "datasets" / "fairface").glob("*/MANIFEST.json"))) == 1

    def boom(*args, **kwargs):
        raise AssertionError("decoded again")

    monkeypatch.setattr(fairface, "decode_images", boom)
    again = load(tmp_path, tmp_path / "cache")
    assert again.fingerprint == first.fingerprint
    for split in first.sets:
        assert torch.equal(again[split].images, first[split].images)
        assert again[split].attrs.keys() == first[split].attrs.keys()
    assert load(tmp_path, tmp_path / "cache", max_images=100).fingerprint == first.fingerprint
    with open(base / "val" / "1.jpg", "ab") as f:
        f.write(b"\0")
    with pytest.raises(AssertionError, match="decoded again"):
        load(tmp_path, tmp_path / "cache")
