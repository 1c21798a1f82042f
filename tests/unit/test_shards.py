"""Disk-backed images: Arrow shards read like the tensor they stand for, releases identical however sharded."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

import bench.data.shards as shards
from bench.core.interfaces import RunContext
from bench.core.registry import mechanisms
from bench.data.base import ImageSet, Splits, SplitsSink, cached_sharded_splits
from bench.data.shards import ShardedImages, SplitWriter, open_split, write_tensor
from bench.nn.conv4 import Conv4
from bench.nn.images import embed, embed_images, image_batches, prepare
from bench.release.dataset import apply_to_split, make_release

CHW = (3, 16, 20)


def images(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 256, (n, *CHW), generator=torch.Generator().manual_seed(seed), dtype=torch.uint8)


@pytest.fixture
def small_shards(monkeypatch):
    monkeypatch.setattr(shards, "SHARD_BYTES", 41 * int(np.prod(CHW)))  # 41 images per shard


def test_sharded_images_index_like_the_tensor(tmp_path, small_shards):
    x = images(300)
    write_tensor(tmp_path / "s", x, batch=37)
    a = ShardedImages(tmp_path / "s", CHW)
    assert len(a.files) == 8 and a.shape == x.shape and len(a) == 300 and a.numel() == x.numel()
    index = torch.randperm(300, generator=torch.Generator().manual_seed(1))[:120]
    mask = torch.rand(300, generator=torch.Generator().manual_seed(2)) > 0.5
    for picked, expected in [(a[:], x), (a[5:250], x[5:250]), (a[-1], x[-1]), (a[7], x[7]), (a[index], x[index]),
                             (a[mask], x[mask]), (a[index.view(12, 10)], x[index.view(12, 10)]), (a[::3], x[::3]),
                             (a[[1, 2, 299]], x[[1, 2, 299]]), (a[300:], x[300:])]:
        assert torch.equal(picked, expected)
    assert torch.equal(torch.cat(list(a.batches(64))), x)
    assert torch.equal(pickle.loads(pickle.dumps(a))[index], x[index])
    with pytest.raises(IndexError):
        a[torch.tensor([300])]


def test_a_split_folder_is_a_hugging_face_dataset(tmp_path, small_shards):
    import datasets

    x = images(100)
    write_tensor(tmp_path / "s", x)
    loaded = datasets.load_from_disk(str(tmp_path / "s"))
    assert len(loaded) == 100
    assert np.array_equal(np.frombuffer(loaded[57]["pixels"], dtype=np.uint8), x[57].reshape(-1).numpy())


def test_small_splits_open_in_memory_and_large_ones_on_disk(tmp_path, monkeypatch):
    x = images(10)
    write_tensor(tmp_path / "s", x)
    assert isinstance(open_split(tmp_path / "s", CHW), torch.Tensor)
    monkeypatch.setattr(shards, "MATERIALIZE_BYTES", 0)
    assert isinstance(open_split(tmp_path / "s", CHW), ShardedImages)


def test_streamed_batches_and_embeddings_equal_the_in_memory_ones(tmp_path, small_shards):
    x = images(200)
    write_tensor(tmp_path / "s", x)
    a = ShardedImages(tmp_path / "s", CHW)
    for workers in (0, 1):
        assert torch.equal(torch.cat(list(image_batches(a, 64, "cpu", workers=workers))), x)
    torch.manual_seed(0)
    model = Conv4(in_channels=3)
    assert torch.equal(embed_images(model, a, 32, torch.device("cpu")), embed(model, prepare(x, 32, "cpu")))


def test_a_dataset_entry_streams_in_and_its_fingerprint_is_its_content(tmp_path, small_shards):
    x = images(90)

    def build(sink: SplitsSink) -> dict:
        writer = sink.images("train", CHW)
        for start in range(0, 90, 25):
            writer.add(x[start : start + 25])
        sink.describe("train", labels=torch.arange(90) // 3, attrs={"a": torch.arange(90) % 2})
        return {"note": "toy"}

    sets, content, info = cached_sharded_splits(tmp_path / "one", "toy", "k", build)
    again, content_again, _ = cached_sharded_splits(tmp_path / "two", "toy", "other-key", build)
    assert content == content_again and info == {"note": "toy"}
    assert torch.equal(sets["train"].images[:], x) and torch.equal(sets["train"].labels, torch.arange(90) // 3)
    other, content_other, _ = cached_sharded_splits(tmp_path / "three", "toy", "k", lambda sink: (
        sink.put("train", ImageSet(x.flip(0), torch.arange(90) // 3, attrs={"a": torch.arange(90) % 2})), {})[1])
    assert content_other != content


def test_a_damaged_shard_is_rebuilt(tmp_path, small_shards, capsys):
    import bench.storage.cache as cache_module

    x = images(90)
    built = []

    def build(sink: SplitsSink) -> dict:
        built.append(1)
        sink.put("train", ImageSet(x, torch.arange(90)))
        return {}

    cached_sharded_splits(tmp_path, "toy", "k", build)
    shard = sorted((tmp_path / "datasets" / "toy" / "k" / "images" / "train").glob("*.arrow"))[1]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    cache_module._verified.clear()
    sets, _, _ = cached_sharded_splits(tmp_path, "toy", "k", build)
    assert len(built) == 2 and torch.equal(sets["train"].images[:], x)
    assert "data-00001.arrow checksum mismatch" in capsys.readouterr().err


@pytest.mark.parametrize("shard_images", [7, 64, 10_000])
def test_a_release_is_bit_identical_however_it_is_sharded(tmp_path, monkeypatch, shard_images):
    monkeypatch.setattr(shards, "SHARD_BYTES", shard_images * int(np.prod(CHW)))
    monkeypatch.setattr(shards, "MATERIALIZE_BYTES", 0)
    x = images(150)
    splits = Splits("toy", {"train": ImageSet(x[:100], torch.arange(100)), "test": ImageSet(x[100:], torch.arange(50))},
                    "fp")
    ctx = RunContext(device=torch.device("cpu"), seed=3, profile="smoke", data_root=None, cache_dir=tmp_path)
    mechanism = mechanisms.get("dp_pix")(epsilon=1, block=4)
    release = make_release(splits, mechanism, ctx)
    for name, split in splits.sets.items():
        assert isinstance(release.splits[name].images, ShardedImages)
        in_memory, _ = apply_to_split(mechanism, split, ctx, f"release/{name}", batch=13)
        assert torch.equal(release.splits[name].images[:], in_memory)


def test_a_writer_checks_what_it_is_given(tmp_path):
    writer = SplitWriter(tmp_path / "s", CHW)
    with pytest.raises(ValueError, match="uint8"):
        writer.add(images(2).float())
    with pytest.raises(ValueError, match="keeps no digest"):
        writer.digest()
    assert writer.close() == 0 and len(ShardedImages(tmp_path / "s", CHW)) == 0
    assert Path(tmp_path / "s" / "state.json").is_file()
