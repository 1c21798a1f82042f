"""MiniImageNet read from Ravi and Larochelle's layout: CSV class splits and images/."""

from __future__ import annotations

import shutil

import pytest
import torch

from bench.core.registry import datasets
from bench.data import imageread
from bench.data.loaders.miniimagenet import MiniImageNet
from bench.errors import BenchError
from tests.fixtures.image_folders import write_miniimagenet

PER_CLASS = 3


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    path = tmp_path_factory.mktemp("data")
    write_miniimagenet(path, classes=(4, 2, 2), per_class=PER_CLASS, size=(100, 80))
    return path


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


def one_line(exc: pytest.ExceptionInfo) -> str:
    assert "\n" not in str(exc.value)
    return str(exc.value)


def test_registered_and_real():
    assert datasets.get("miniimagenet") is MiniImageNet and not MiniImageNet.synthetic


def test_class_splits_sizes_and_labels(root, cache):
    splits = MiniImageNet().load(root, {"size": 32}, cache)
    assert splits.info["classes"] == {"train": 4, "val": 2, "test": 2} and splits.info["paper_split"] is False
    wnids = sorted(w for s in ("train", "val", "test") for w in splits.info["class_names"][s])
    for split, images in splits.sets.items():
        assert images.images.shape == (splits.info["classes"][split] * PER_CLASS, 3, 32, 32)
        assert sorted({wnids[i] for i in images.labels.tolist()}) == splits.info["class_names"][split]
    train = splits["train"]
    assert train.labels.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert not torch.equal(train.images[0], train.images[3]) and torch.equal(train.images[0], train.images[1])
    assert splits.info["images"]["native"]["median"] == [80, 100] and splits.info["images"]["upscaled"] == 0


def test_the_paper_size_upscales_these_images_and_records_it(root, cache):
    splits = MiniImageNet().load(root, {}, cache)
    assert splits["test"].images.shape[1:] == (3, 84, 84)
    assert splits.info["images"]["upscaled"] == 8 * PER_CLASS  # 80-pixel high crop -> 84



def test_images_in_class_folders_load_the_same(root, cache, tmp_path):
    write_miniimagenet(tmp_path, classes=(4, 2, 2), per_class=PER_CLASS, size=(100, 80), nested=True)
    flat = MiniImageNet().load(root, {"size": 32}, cache)
    nested = MiniImageNet().load(tmp_path, {"size": 32}, tmp_path / "cache")
    assert nested.fingerprint == flat.fingerprint


def test_per_class_keeps_the_first_images(root, cache):
    shape = MiniImageNet().inspect(root, {"per_class": 2})
    assert {s: v.counts for s, v in shape.items()} == {"train": (2,) * 4, "val": (2,) * 2, "test": (2,) * 2}


def test_inspect_decodes_nothing(root, monkeypatch):
    monkeypatch.setattr(imageread, "read_image", lambda *a, **k: pytest.fail("inspect decoded an image"))
    assert MiniImageNet().inspect(root, {})["train"].counts == (PER_CLASS,) * 4


def test_missing_or_malformed_layout_is_a_one_line_error(root, tmp_path):
    with pytest.raises(BenchError) as exc:
        MiniImageNet().inspect(tmp_path, {})
    assert "train.csv, val.csv, test.csv and images/ not found" in one_line(exc) and "filename,label" in str(exc.value)
    base = tmp_path / "miniimagenet"
    shutil.copytree(root / "miniimagenet", base)
    image = sorted((base / "images").iterdir())[0]
    image.unlink()
    with pytest.raises(BenchError) as exc:
        MiniImageNet().inspect(tmp_path, {})
    assert "1 listed image(s)" in one_line(exc) and image.name in str(exc.value)
    val = (base / "val.csv").read_text()
    (base / "val.csv").write_text(val + (base / "train.csv").read_text().splitlines()[-1] + "\n")
    with pytest.raises(BenchError) as exc:
        MiniImageNet().inspect(tmp_path, {})
    assert "in both train.csv and val.csv" in one_line(exc)
    (base / "val.csv").write_text(val.replace("filename,label", "file,class"))
    with pytest.raises(BenchError) as exc:
        MiniImageNet().inspect(tmp_path, {})
    assert "val.csv" in one_line(exc) and "filename,label" in str(exc.value)
    with pytest.raises(BenchError) as exc:
        MiniImageNet().inspect(root, {"size": 84, "per_clas": 2})
    assert "did you mean 'task.data.per_class'" in one_line(exc)
