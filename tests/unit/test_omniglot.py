"""Omniglot read from the official layout: character-disjoint splits, 28 x 28 grey, rotations as classes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from bench.core.registry import datasets
from bench.data import imageread
from bench.data.classsplit import split_classes
from bench.data.loaders.omniglot import DEFAULTS, Omniglot
from bench.errors import BenchError
from tests.fixtures.image_folders import write_omniglot

CHARACTERS = 12  # 4 + 3 background, 5 evaluation
DRAWERS = 3


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    path = tmp_path_factory.mktemp("data")
    write_omniglot(path, drawers=DRAWERS)
    return path


@pytest.fixture(scope="module")
def loaded(root, tmp_path_factory):
    return Omniglot().load(root, {}, tmp_path_factory.mktemp("cache"))


def one_line(exc: pytest.ExceptionInfo) -> str:
    assert "\n" not in str(exc.value)
    return str(exc.value)


def test_registered_and_real():
    assert datasets.get("omniglot") is Omniglot and not Omniglot.synthetic


def test_the_paper_split_sizes_of_1623_characters():
    counts = {f"a/character{i}": 20 for i in range(1623)}
    groups = split_classes(counts, {**DEFAULTS, "min_images": 1}, "omniglot")
    assert [len(groups[s]) for s in ("train", "val", "test")] == [1028, 172, 423]


def test_classes_are_characters_times_four_rotations_at_28_grey(loaded):
    assert loaded.info["characters"] == {"train": 8, "val": 1, "test": 3}  # 1028:172:423 of 12
    assert loaded.info["classes"] == {"train": 32, "val": 4, "test": 12}
    for split, images in loaded.sets.items():
        assert images.images.shape == (loaded.info["classes"][split] * DRAWERS, 1, 28, 28)
        assert images.labels.unique().numel() == loaded.info["classes"][split]
        assert (images.labels.bincount()[images.labels.unique()] == DRAWERS).all()
    chars = {s: set((v.labels // 4).tolist()) for s, v in loaded.sets.items()}
    assert not (chars["train"] & chars["test"] or chars["train"] & chars["val"] or chars["val"] & chars["test"])
    assert loaded.info["images"] == {"native": {"min": [105, 105], "median": [105, 105], "max": [105, 105]},
                                     "stored": [28, 28], "upscaled": 0}


def test_each_drawing_is_stored_with_its_three_rotations(root, loaded):
    train = loaded["train"]
    for start in range(0, len(train), 4):
        block, labels = train.images[start : start + 4], train.labels[start : start + 4]
        assert labels.tolist() == [labels[0].item() + r for r in range(4)] and labels[0] % 4 == 0
        for r in range(4):
            assert torch.equal(block[r], torch.rot90(block[0], r, dims=(1, 2)))
    first = sorted((root / "omniglot").glob("images_*/*/*/*.png"))  # character 0 in sorted order
    label0 = sorted(p for p in first if p.parent.parent.name == "Alphabet_A" and p.parent.name == "character01")[0]
    expected = Image.open(label0).convert("L").resize((28, 28), Image.Resampling.BILINEAR)
    split = next(s for s, v in loaded.sets.items() if 0 in v.labels.tolist())
    got = loaded[split].images[loaded[split].labels.tolist().index(0), 0].numpy()
    assert np.abs(got.astype(int) - np.asarray(expected, dtype=int)).max() <= 1


def test_without_rotations_classes_are_characters(root, tmp_path):
    splits = Omniglot().load(root, {"rotations": False, "size": 14}, tmp_path / "cache")
    assert {s: v.labels.unique().numel() for s, v in splits.sets.items()} == {"train": 8, "val": 1, "test": 3}
    assert splits["train"].images.shape[1:] == (1, 14, 14)


def test_split_lists_in_the_prototypical_networks_layout(root, tmp_path):
    lists = tmp_path / "vinyals"
    lists.mkdir()
    (lists / "train.txt").write_text("".join(f"Alphabet_A/character0{i}/rot{r:03d}\n" for i in (1, 2, 3, 4)
                                             for r in (0, 90, 180, 270)))
    (lists / "val.txt").write_text("Alphabet_B/character01/rot000\n")
    (lists / "test.txt").write_text("Alphabet_C/character01/rot000\nAlphabet_C/character02/rot000\n")
    splits = Omniglot().load(root, {"splits": str(lists)}, tmp_path / "cache")
    assert splits.info["split"] == "split lists" and splits.info["characters"] == {"train": 4, "val": 1, "test": 2}
    public = Omniglot().load_public(root, {"splits": str(lists)}, tmp_path / "cache")
    assert len(public) == 4 * 4 * DRAWERS and not set((public.labels // 4).tolist()) & {0, 1, 2, 3}
    (lists / "test.txt").write_text("Alphabet_C/character09\n")
    with pytest.raises(BenchError) as exc:
        Omniglot().inspect(root, {"splits": str(lists)})
    assert "test.txt:1" in one_line(exc) and "Alphabet_C/character09" in str(exc.value)
    (lists / "test.txt").unlink()
    with pytest.raises(BenchError) as exc:
        Omniglot().inspect(root, {"splits": str(lists)})
    assert "test.txt" in one_line(exc)


def test_max_classes_caps_split_lists_in_proportion(root, tmp_path):
    lists = tmp_path / "vinyals"
    lists.mkdir()
    (lists / "train.txt").write_text("".join(f"Alphabet_A/character0{i}\n" for i in (1, 2, 3, 4)))
    (lists / "val.txt").write_text("Alphabet_B/character01\nAlphabet_B/character02\n")
    (lists / "test.txt").write_text("Alphabet_C/character01\nAlphabet_C/character02\n")
    options = {"splits": str(lists), "max_classes": 4}
    shape = Omniglot().inspect(root, options)
    assert {s: len(v.counts) // 4 for s, v in shape.items()} == {"train": 2, "val": 1, "test": 1}
    splits = Omniglot().load(root, options, tmp_path / "cache")
    assert splits.info["characters"] == {"train": 2, "val": 1, "test": 1}
    again = Omniglot().inspect(root, options)
    assert {s: v.counts for s, v in again.items()} == {s: v.counts for s, v in shape.items()}
    whole = Omniglot().inspect(root, {"splits": str(lists), "max_classes": 8})
    assert {s: len(v.counts) // 4 for s, v in whole.items()} == {"train": 4, "val": 2, "test": 2}


def test_missing_layout_and_bad_options_are_one_line_errors(root, tmp_path):
    with pytest.raises(BenchError) as exc:
        Omniglot().inspect(None, {})
    assert "images_background/<Alphabet>/character<NN>" in one_line(exc)
    write_omniglot(tmp_path, evaluation=())
    with pytest.raises(BenchError) as exc:
        Omniglot().inspect(tmp_path, {})
    assert "images_evaluation/ not found" in one_line(exc)
    for options, word in (({"size": [28, 14]}, "square"), ({"rotation": True}, "did you mean 'task.data.rotations'"),
                          ({"rotations": "sometimes"}, "rotations")):
        with pytest.raises(BenchError) as exc:
            Omniglot().inspect(root, options)
        assert word in one_line(exc)


def test_inspect_decodes_nothing_and_matches_load(root, loaded, monkeypatch):
    monkeypatch.setattr(imageread, "read_image", lambda *a, **k: pytest.fail("inspect decoded an image"))
    shape = Omniglot().inspect(root, {})
    assert {s: (len(v.counts), v.images) for s, v in shape.items()} == \
        {s: (loaded.info["classes"][s], len(v)) for s, v in loaded.sets.items()}


def test_characters_beyond_max_classes_are_public(root, tmp_path):
    options = {"max_classes": 6}
    splits = Omniglot().load(root, options, tmp_path / "cache")
    public = Omniglot().load_public(root, options, tmp_path / "cache")
    used = {c for v in splits.sets.values() for c in (v.labels // 4).tolist()}
    assert len(used) == 6 and public is not None and not set((public.labels // 4).tolist()) & used
    assert Omniglot().load_public(root, {}, tmp_path / "cache") is None
