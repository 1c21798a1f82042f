"""folder_images: a class-per-folder tree split by image into train / val / test / population."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from bench.data.loaders.folder_images import SPLITS, FolderImages, allocate, parse_fractions
from bench.errors import BenchError


def write_tree(root, classes=3, per_class=10, extra_small=True, size=(12, 12)):
    """Writes random RGB PNGs of ``size`` (height, width) in ``classes`` folders (and a one-image class)."""
    rng = np.random.default_rng(0)
    for c in range(classes):
        folder = root / f"class_{c}"
        folder.mkdir(parents=True)
        for i in range(per_class):
            pixels = rng.integers(0, 256, (*size, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(folder / f"{i:03d}.png")
    if extra_small:
        (root / "tiny").mkdir()
        Image.fromarray(np.zeros((12, 12, 3), np.uint8)).save(root / "tiny" / "only.png")
    return root


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return write_tree(tmp_path_factory.mktemp("data") / "objects")


def test_every_class_is_in_every_split_and_no_image_is_in_two(tree, tmp_path):
    splits = FolderImages().load(None, {"root": str(tree), "size": 16}, tmp_path)
    assert set(splits.sets) == set(SPLITS)
    assert splits.info["classes"] == ["class_0", "class_1", "class_2"]  # "tiny" has fewer than min_images
    for name in SPLITS:
        assert sorted(set(splits[name].labels.tolist())) == [0, 1, 2]
    assert [len(splits[s]) for s in SPLITS] == [12, 3, 6, 9]  # 10 a class: 4 / 1 / 2 / 3
    seen = [bytes(img.numpy().tobytes()) for s in SPLITS for img in splits[s].images]
    assert len(set(seen)) == len(seen) == 30
    again = FolderImages().load(None, {"root": str(tree), "size": 16}, tmp_path / "other")
    assert again.fingerprint == splits.fingerprint


def test_inspect_decodes_no_image_and_agrees_with_load(tree, tmp_path):
    shape = FolderImages().inspect(None, {"root": str(tree)})
    assert {s: shape[s].images for s in SPLITS} == {"train": 12, "val": 3, "test": 6, "population": 9}
    assert {shape[s].stored for s in SPLITS} == {(12, 12)}  # from the headers: the memory bound's stored size
    loaded = FolderImages().load(None, {"root": str(tree)}, tmp_path)
    assert {tuple(loaded[s].images.shape[-2:]) for s in SPLITS} == {(12, 12)}  # stored at their own size


@pytest.mark.parametrize("options, words", [
    ({"image_fractions": "0.5,0.5"}, "four fractions"),
    ({"image_fractions": "0,0.2,0.3,0.5"}, "train > 0"),
    ({"min_images": 50}, "min_images=50"),
    ({"split_fractions": "0.6,0.2,0.2"}, "unknown option"),
])
def test_bad_options_are_one_line(tree, options, words):
    with pytest.raises(BenchError, match=words.replace("(", r"\(")):
        FolderImages().inspect(None, {"root": str(tree), **options})


def test_allocation_keeps_every_split_filled_when_it_can():
    assert allocate(10, parse_fractions("0.4,0.1,0.2,0.3")) == [4, 1, 2, 3]
    assert allocate(4, parse_fractions("0.7,0.1,0.1,0.1")) == [1, 1, 1, 1]
    assert sum(allocate(7, parse_fractions("0.4,0.1,0.2,0.3"))) == 7
