"""Mechanisms run on the images' own pixels: small images are stored at their size, grey folders stay grey."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from bench.core.interfaces import RunContext
from bench.data import stored_size as storage
from bench.data.loaders.folder import Folder
from bench.data.loaders.folder_images import FolderImages


def write_faces(root: Path, people: int = 6, per: int = 4, size_wh: tuple[int, int] = (24, 28), mode: str = "L",
                seed: int = 0, level: int | None = None) -> Path:
    """Writes ``people`` folders of ``per`` random images of ``size_wh`` in ``mode`` (mid-grey ``level`` if given)."""
    rng = np.random.default_rng(seed)
    for p in range(people):
        for i in range(per):
            shape = (size_wh[1], size_wh[0]) + ((3,) if mode == "RGB" else ())
            noise = rng.integers(-8, 9, shape)
            pixels = rng.integers(0, 256, shape) if level is None else np.full(shape, level) + noise
            path = root / f"p{p:02d}" / f"{i}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(pixels.astype(np.uint8)).save(path)
    return root


def load(root: Path, cache: Path, cls=Folder, **options):
    return cls().load(None, {"root": str(root), "split_fractions": [0.5, 0.17, 0.33], **options}, cache)


def test_storage_size_keeps_the_target_where_images_cover_it_else_their_smallest_common_size():
    big = np.array([[112, 92]] * 4)
    assert storage.storage_size(big, ["a"] * 4, (64, 64), False).size == (64, 64)
    small = np.array([[28, 24]] * 4)
    kept = storage.storage_size(small, ["a"] * 4, (64, 64), True)
    assert kept.size == (28, 24) and kept.upscaled == 0 and kept.grey
    mixed = np.array([[28, 24], [40, 30], [50, 50]])
    assert storage.storage_size(mixed, ["a", "b", "c"], (64, 64), False).size == (28, 24)
    assert storage.storage_size(mixed, ["a", "b", "c"], (24, 24), False).size == (24, 24)  # size=24: no upscaling
    assert storage.storage_size(mixed, ["a", "b", "c"], (24, 24), False).upscaled == 0


def test_one_tiny_image_is_upscaled_and_named_instead_of_shrinking_every_other():
    natives = np.array([[40, 40]] * 9 + [[8, 10]])
    names = [f"x/{i}.png" for i in range(10)]
    kept = storage.storage_size(natives, names, (64, 64), False)
    assert kept.size == (40, 40) and kept.upscaled == 1 and kept.examples == ("x/9.png (8x10)",)
    assert kept.smallest == (8, 10)
    fixed = storage.storage_size(natives, names, (64, 64), False, own_size=False)
    assert fixed.size == (64, 64) and fixed.upscaled == 10


def test_a_folder_of_small_grey_faces_is_stored_at_its_own_size_in_one_channel(tmp_path):
    root = write_faces(tmp_path / "faces")
    splits = load(root, tmp_path / "cache", size=64)
    assert {tuple(s.images.shape[1:]) for s in splits.sets.values()} == {(1, 28, 24)}
    info = splits.info["storage"]
    assert info["stored"] == [28, 24] and info["channels"] == 1 and info["upscaled"] == 0 and info["target"] == [64, 64]
    assert splits.info["images"]["upscaled"] == 0
    files = sorted(p for p in root.rglob("*.png") if p.parent.name in splits.info["class_names"]["train"])
    first = np.array(Image.open(files[0]))
    assert torch.equal(splits["train"].images[0, 0], torch.from_numpy(first))  # the user's pixels, untouched


def test_the_grey_option_overrides_detection_and_a_smaller_size_is_never_upscaled(tmp_path):
    root = write_faces(tmp_path / "faces")
    rgb = load(root, tmp_path / "cache", size=64, grey=False)
    images = rgb["train"].images
    assert images.shape[1:] == (3, 28, 24) and torch.equal(images[:, 0], images[:, 2])
    assert load(root, tmp_path / "cache", size=64, grey="auto")["train"].images.shape[1] == 1
    at24 = load(root, tmp_path / "cache", size=24)
    assert at24["train"].images.shape[1:] == (1, 24, 24) and at24.info["images"]["upscaled"] == 0
    colour = write_faces(tmp_path / "colour", mode="RGB")
    assert load(colour, tmp_path / "cache", size=64)["train"].images.shape[1] == 3


def test_the_fingerprint_follows_the_stored_images(tmp_path):
    root = write_faces(tmp_path / "faces")
    cache = tmp_path / "cache"
    prints = {load(root, cache, size=64).fingerprint, load(root, cache, size=64, grey=False).fingerprint,
              load(root, cache, size=24).fingerprint}
    assert len(prints) == 3
    assert load(root, cache, size=32).fingerprint == load(root, cache, size=64).fingerprint  # both stored 28x24
    assert Folder.version >= 2 and FolderImages.version == Folder.version  # cells and boards keyed anew


def test_folder_images_are_stored_at_their_own_size_and_public_images_follow_the_splits_storage(tmp_path):
    root = write_faces(tmp_path / "faces", people=4, per=8)
    for options in ({}, {"size": 32}):  # the DP ViT resizes after the release (task.model.image_size)
        images = FolderImages().load(None, {"root": str(root), **options}, tmp_path / "cache")
        assert images["train"].images.shape[1:] == (1, 28, 24) and images.info["storage"]["upscaled"] == 0
    public = Folder().load_public(None, {"root": str(root), "size": 64, "max_classes": 3,
                                         "split_fractions": [0.34, 0.33, 0.33]}, tmp_path / "cache")
    assert public is not None and public.images.shape[1:] == (1, 28, 24)


def test_bench_release_of_a_grey_folder_is_the_cells_operation(tmp_path):
    """The same dp_pix at C = 1 and the same cells: per-pixel noise statistics agree (1000s of cells each)."""
    from bench.core.registry import mechanisms
    from bench.release.dataset import apply_to_split
    from bench.release.folder import execute, plan

    root = write_faces(tmp_path / "faces", people=10, per=10, level=128)
    released = tmp_path / "released"
    args = argparse.Namespace(mechanism="dp_pix", mechanism_file=None, param=["epsilon=1", "block=4"], device="cpu",
                              source=root, target=released, fit_on=None, cache_dir=None, boxes=None, format="png",
                              overwrite=False)
    outcome = execute(plan(args), lambda msg: None, lambda it, total=None, desc=None: it)
    assert outcome.sizes == {"24x28x1": 100}
    out = [np.asarray(Image.open(p)) for p in sorted(released.rglob("*.png"))]
    src = [np.asarray(Image.open(p)) for p in sorted(root.rglob("*.png"))]
    assert Image.open(next(released.rglob("*.png"))).mode == "L"
    noise_release = np.stack(out).astype(np.float64) - np.stack(src)

    splits = load(root, tmp_path / "cache", size=64)
    split = splits["train"]
    mechanism = mechanisms.get("dp_pix")(epsilon=1.0, block=4)
    ctx = RunContext(device=torch.device("cpu"), seed=0, profile="smoke", data_root=None, cache_dir=tmp_path / "c")
    cell, _ = apply_to_split(mechanism, split, ctx, "release/train")
    assert cell.shape[1:] == (1, 28, 24)
    noise_cell = cell.double().numpy() - split.images.double().numpy()
    # 4 x 4 cells of one value, 7 x 6 per image, in both
    assert np.all(cell.numpy().reshape(len(cell), 7, 4, 6, 4).std(axis=(2, 4)) == 0)
    assert np.all(np.stack(out).reshape(100, 7, 4, 6, 4).std(axis=(2, 4)) == 0)
    a, b = noise_cell.std(), noise_release.std()
    assert abs(a - b) / b < 0.12, (a, b)
    assert abs(noise_cell.mean() - noise_release.mean()) < 2.0
    scale = mechanism.noise_scale(1)  # one channel: a third of what RGB would need
    assert scale == pytest.approx(mechanism.noise_scale(3) / 3)
    assert 0.8 * np.sqrt(2) * scale < b < 1.2 * np.sqrt(2) * scale


def test_the_claims_tail_counts_the_channels_the_mechanism_ran_at():
    from bench.core.registry import mechanisms
    from bench.release.secure_streams import laplace_exposure

    mechanism = mechanisms.get("dp_pix")(epsilon=1.0, block=4, m=2)
    grey, rgb = laplace_exposure(mechanism, (28, 24), 1), laplace_exposure(mechanism, (28, 24))
    assert (grey.affected, rgb.affected) == (2, 6) and grey.max_shift == pytest.approx(3 * rgb.max_shift)


def test_networks_that_want_rgb_take_grey_inputs():
    from bench.nn.face_cnn import SmallFaceNet

    net = SmallFaceNet(4, width=4).eval()
    grey = torch.rand(2, 1, 16, 16) * 2 - 1
    assert torch.allclose(net.embed(grey), net.embed(grey.expand(-1, 3, -1, -1)))


def test_the_chain_records_the_shape_the_mechanism_ran_at_and_the_warning_says_how_to_avoid_upscaling(tmp_path):
    from bench.cell.data import image_chain
    from bench.data.stored_size import upscaling_warning

    class Task:
        def input_size(self):
            return (32, 32)

    root = write_faces(tmp_path / "faces")
    chain = image_chain(load(root, tmp_path / "cache", size=64), Task())
    assert chain["release_shape"] == [1, 28, 24] and chain["channels"] == 1 and chain["task_input"] == [32, 32]
    chain = {**chain, "upscaled": 1, "upscaled_examples": ["p00/0.png (8x8)"], "native": {"min": [8, 8]}}
    text = upscaling_warning(chain, "folder")
    assert "p00/0.png (8x8)" in text and "--set task.data.size=8x8" in text and "\n" not in text


def test_a_hugging_face_table_of_small_grey_photos_is_stored_at_its_size_in_one_channel(tmp_path):
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    from bench.data.loaders.hf import HuggingFace

    def png(seed: int) -> bytes:
        buffer = io.BytesIO()
        Image.fromarray(np.random.default_rng(seed).integers(0, 256, (28, 24)).astype(np.uint8)).save(buffer, "PNG")
        return buffer.getvalue()

    root = tmp_path / "faces" / "data"
    root.mkdir(parents=True)
    names = [f"person{i}" for i in range(8) for _ in range(4)]
    pq.write_table(pa.table({"image": [png(k) for k in range(len(names))], "label": names}),
                   root / "train-00000-of-00001.parquet")
    options = {"path": str(root.parent), "size": 64, "image_column": "image", "split_fractions": [0.5, 0.25, 0.25]}
    splits = HuggingFace().load(None, options, tmp_path / "cache")
    assert splits["train"].images.shape[1:] == (1, 28, 24) and splits.info["storage"]["upscaled"] == 0
