"""CIFAR-10 read from its official python layout: decoding, disjoint stratified splits, safe unpickling, errors."""

from __future__ import annotations

import os
import pickle
import shutil

import numpy as np
import pytest
import torch

import bench.data.loaders.cifar10 as cifar
from bench.core.registry import datasets
from bench.data.loaders.cifar10 import Cifar10
from bench.errors import BenchError

PER_BATCH = 100
SMALL = {"n_train": 200, "n_val": 50, "n_population": 150, "n_test": 60}
NAMES = [b"airplane", b"automobile", b"bird", b"cat", b"deer", b"dog", b"frog", b"horse", b"ship", b"truck"]


def label_of(index: int) -> int:
    """The class of training image ``index`` (test images: ``index`` = 50,000 + row): 10 of each per batch."""
    return (index * 3 + index // PER_BATCH) % 10


def batch(first: int, protocol: int) -> bytes:
    """A batch of PER_BATCH images whose red pixels (0, 0) and (0, 1) spell the image's index."""
    index = np.arange(first, first + PER_BATCH)
    rng = np.random.default_rng(first)
    data = rng.integers(0, 256, size=(PER_BATCH, 3072), dtype=np.uint8)
    data[:, 0], data[:, 1] = index // 256 % 256, index % 256
    data[:, 2] = index // 65536
    data[:, 1024 + 5 * 32 + 7] = (3 * index) % 251  # green, row 5, column 7
    d = {b"batch_label": b"training batch", b"labels": [label_of(int(i)) for i in index], b"data": data,
         b"filenames": [f"img_{i}.png".encode() for i in index]}
    return pickle.dumps(d, protocol=protocol)


def write_cifar(root, with_test: bool = True):
    base = root / "cifar-10-batches-py"
    base.mkdir(parents=True)
    for b in range(5):
        # Protocol 2 is how Python 3 writes old-style pickles (bytes through _codecs.encode).
        (base / f"data_batch_{b + 1}").write_bytes(batch(b * PER_BATCH, protocol=2 if b % 2 else 4))
    if with_test:
        (base / "test_batch").write_bytes(batch(50_000, protocol=4))
    meta = {b"num_cases_per_batch": PER_BATCH, b"label_names": NAMES, b"num_vis": 3072}
    (base / "batches.meta").write_bytes(pickle.dumps(meta, protocol=2))
    return base


def index_of(images: torch.Tensor) -> list[int]:
    red = images[:, 0, 0].long()
    return (red[:, 2] * 65536 + red[:, 0] * 256 + red[:, 1]).tolist()


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    path = tmp_path_factory.mktemp("data")
    write_cifar(path)
    return path


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def splits(root, cache):
    return Cifar10().load(root, SMALL, cache)


def one_line(exc: pytest.ExceptionInfo) -> str:
    assert "\n" not in str(exc.value)
    return str(exc.value)


def test_registered_and_real():
    assert datasets.get("cifar10") is Cifar10 and not Cifar10.synthetic
    assert "cifar-10-batches-py" in Cifar10.layout and "test_batch" in Cifar10.layout


def test_shapes_labels_and_row_major_decoding(splits):
    assert splits.dataset == "cifar10" and not splits.synthetic
    assert splits.info["classes"] == [n.decode() for n in NAMES]
    for split in ("train", "val", "test", "population"):
        s = splits[split]
        n = SMALL[f"n_{split}"]
        assert s.images.shape == (n, 3, 32, 32) and s.images.dtype == torch.uint8
        assert s.labels.shape == (n,) and s.labels.dtype == torch.int64
        index = index_of(s.images)
        assert index == sorted(index)  # file order
        assert s.labels.tolist() == [label_of(i) for i in index]
        assert s.images[:, 1, 5, 7].tolist() == [(3 * i) % 251 for i in index]
    assert splits.info["n_images"] == {s: SMALL[f"n_{s}"] for s in ("train", "val", "test", "population")}
    assert splits.info["images"]["upscaled"] == 0 and splits.info["duplicates"]["across_splits"] == 0


def test_splits_are_disjoint_and_test_comes_from_test_batch(splits):
    index = {s: set(index_of(splits[s].images)) for s in splits.sets}
    assert all(i >= 50_000 for i in index["test"]) and all(i < 500 for s in cifar.POOL_SPLITS for i in index[s])
    for a in ("train", "val", "population"):
        for b in ("train", "val", "population"):
            assert a == b or not index[a] & index[b]
    assert sum(len(v) for v in index.values()) == sum(SMALL.values())


def test_splits_are_class_stratified(splits):
    for split in splits.sets:
        counts = torch.bincount(splits[split].labels, minlength=10)
        assert int(counts.max() - counts.min()) <= 1, (split, counts)
        assert splits.info["per_class"][split] == counts.tolist()


def test_inspect_matches_load_and_decodes_nothing(root, splits, monkeypatch):
    monkeypatch.setattr(cifar, "read_pickle", lambda *a, **k: pytest.fail("inspect read a pickle"))
    shape = Cifar10().inspect(root, SMALL)
    assert {s: v.counts for s, v in shape.items()} == {
        s: tuple(sorted(splits.info["per_class"][s], reverse=True)) for s in splits.sets}
    defaults = Cifar10().inspect(root, {})
    assert {s: v.images for s, v in defaults.items()} == {"train": 25_000, "val": 5_000, "test": 10_000,
                                                          "population": 20_000}
    assert defaults["train"].counts == (2_500,) * 10


def test_deterministic_seeded_and_train_grows_as_a_prefix(root, cache, splits, tmp_path):
    again = Cifar10().load(root, SMALL, tmp_path / "cache")
    assert again.fingerprint == splits.fingerprint
    assert all(torch.equal(again[s].images, splits[s].images) for s in splits.sets)
    other = Cifar10().load(root, {**SMALL, "seed": 1}, cache)
    assert other.fingerprint != splits.fingerprint
    assert set(index_of(other["train"].images)) != set(index_of(splits["train"].images))
    bigger = Cifar10().load(root, {**SMALL, "n_train": 250}, cache)
    assert set(index_of(splits["train"].images)) <= set(index_of(bigger["train"].images))


def test_whole_test_batch_in_file_order(root, cache):
    s = Cifar10().load(root, {**SMALL, "n_test": PER_BATCH}, cache)
    assert index_of(s["test"].images) == list(range(50_000, 50_000 + PER_BATCH))


def test_missing_data_is_a_one_line_error(root, tmp_path):
    with pytest.raises(BenchError) as exc:
        Cifar10().inspect(None, {})
    assert "no --data-root" in one_line(exc) and "cifar-10-batches-py" in str(exc.value)
    with pytest.raises(BenchError) as exc:
        Cifar10().load(tmp_path, SMALL, tmp_path / "cache")
    assert "cifar-10-batches-py/ not found" in one_line(exc) and "data_batch_1" in str(exc.value)
    write_cifar(tmp_path, with_test=False)
    with pytest.raises(BenchError) as exc:
        Cifar10().inspect(tmp_path, SMALL)
    assert "test_batch in" in one_line(exc) and "not found" in str(exc.value)


def test_sizes_too_large_name_the_options(root, cache):
    with pytest.raises(BenchError) as exc:
        Cifar10().inspect(root, {"n_train": 30_000, "n_population": 20_000})
    assert "55000" in one_line(exc) and "task.data.n_train" in str(exc.value)
    with pytest.raises(BenchError) as exc:
        Cifar10().inspect(root, {"n_test": 10_001})
    assert "task.data.n_test" in one_line(exc)
    with pytest.raises(BenchError) as exc:  # fits the official sizes, not this copy
        Cifar10().load(root, {**SMALL, "n_population": 300}, cache)
    assert "holds 500 training images" in one_line(exc) and "task.data.n_population" in str(exc.value)
    for bad, name in (({"n_val": 0}, "task.data.n_val"), ({"n_trian": 5}, "did you mean 'task.data.n_train'"),
                      ({"seed": "x"}, "task.data.seed")):
        with pytest.raises(BenchError) as exc:
            Cifar10().inspect(root, bad)
        assert name in one_line(exc)


class Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_a_pickle_naming_os_system_is_refused_without_running(root, tmp_path):
    base = tmp_path / "cifar-10-batches-py"
    shutil.copytree(root / "cifar-10-batches-py", base)
    marker = tmp_path / "ran"
    (base / "data_batch_3").write_bytes(pickle.dumps({b"data": Evil(marker), b"labels": []}))
    with pytest.raises(BenchError) as exc:
        Cifar10().load(tmp_path, SMALL, tmp_path / "cache")
    message = one_line(exc)
    assert "data_batch_3" in message and "not a CIFAR-10 batch" in message and "system" in message
    assert "refused global" in message and "without running it" in message
    assert not marker.exists()


def test_a_file_that_is_not_a_batch_names_the_file(root, tmp_path):
    base = tmp_path / "cifar-10-batches-py"
    shutil.copytree(root / "cifar-10-batches-py", base)
    (base / "test_batch").write_bytes(b"not a pickle at all")
    with pytest.raises(BenchError) as exc:
        Cifar10().load(tmp_path, SMALL, tmp_path / "cache1")
    assert "test_batch is not a CIFAR-10 batch" in one_line(exc)
    (base / "test_batch").write_bytes(pickle.dumps({b"data": np.zeros((3, 100), np.uint8), b"labels": [0, 1, 2]}))
    with pytest.raises(BenchError) as exc:
        Cifar10().load(tmp_path, SMALL, tmp_path / "cache2")
    assert "test_batch is not a CIFAR-10 batch" in one_line(exc) and "3072" in str(exc.value)
    whole = (root / "cifar-10-batches-py" / "test_batch").read_bytes()
    (base / "test_batch").write_bytes(whole[: len(whole) // 2])  # a download cut short
    with pytest.raises(BenchError) as exc:
        Cifar10().load(tmp_path, SMALL, tmp_path / "cache3")
    assert "test_batch is not a CIFAR-10 batch (pickle data was truncated)" in one_line(exc)


def test_python2_pickles_as_the_official_files_are_written_load():
    """Python 2's cPickle (protocol 2, str as SHORT_BINSTRING, numpy.core names), as in cifar-10-python.tar.gz."""
    import io

    raw = (b"\x80\x02}q\x00(U\x04dataq\x01cnumpy.core.multiarray\n_reconstruct\nq\x02cnumpy\nndarray\nq\x03K\x00"
           b"\x85U\x01b\x87Rq\x04(K\x01K\x01K\x03\x86cnumpy\ndtype\nU\x02u1K\x00K\x01\x87R(K\x03U\x01|NNNJ\xff\xff"
           b"\xff\xffJ\xff\xff\xff\xffK\x00tb\x89U\x03\x01\x02\x03tbU\x06labelsq\x05]q\x06K\x07au.")
    d = cifar.BatchUnpickler(io.BytesIO(raw), encoding="bytes").load()
    assert d[b"data"].dtype == np.uint8 and d[b"data"].tolist() == [[1, 2, 3]] and d[b"labels"] == [7]
