"""Synthetic objects: determinism, prefix stability, balance, disjoint splits, shapes, learnability, speed."""

from __future__ import annotations

import time

import pytest
import torch
import torch.nn.functional as F

from bench.core.registry import datasets
from bench.data.synthetic.synth_objects import (
    CLASSES,
    GENERATOR_VERSION,
    SPLITS,
    SynthObjects,
    generate,
    render_split,
    resolve_options,
)
from bench.errors import BenchError

SMALL = {"n_train": 40, "n_val": 20, "n_test": 30, "n_population": 25}


@pytest.fixture(scope="module")
def splits(tmp_path_factory):
    return SynthObjects().load(None, SMALL, tmp_path_factory.mktemp("objects"))


@pytest.fixture(scope="module")
def learn():
    """Enough images for a quick learnability check (about 0.3 s to render)."""
    return generate(**resolve_options({"n_train": 1000, "n_val": 1, "n_test": 500, "n_population": 1}))


def one_line(exc: pytest.ExceptionInfo) -> str:
    assert "\n" not in str(exc.value)
    return str(exc.value)


def test_registered_and_synthetic():
    assert datasets.get("synth_objects") is SynthObjects
    assert SynthObjects.synthetic and SynthObjects.layout and isinstance(GENERATOR_VERSION, int)


def test_shapes_dtypes_and_info(splits):
    assert splits.synthetic and splits.dataset == "synth_objects"
    assert splits.info["classes"] == list(CLASSES) and len(CLASSES) == 10
    for split in SPLITS:
        s = splits[split]
        n = SMALL[f"n_{split}"]
        assert s.images.shape == (n, 3, 32, 32) and s.images.dtype == torch.uint8
        assert s.labels.shape == (n,) and s.labels.dtype == torch.int64
        assert 0 <= int(s.labels.min()) and int(s.labels.max()) <= 9
    assert splits.info["n_images"] == {s: SMALL[f"n_{s}"] for s in SPLITS}
    other = generate(**resolve_options({**SMALL, "size": 20}))
    assert other["val"]["images"].shape == (20, 3, 20, 20)


def test_deterministic_and_seeded(splits, tmp_path):
    again = SynthObjects().load(None, SMALL, tmp_path)
    assert again.fingerprint == splits.fingerprint
    fresh = generate(**resolve_options(SMALL))
    for split in SPLITS:
        assert torch.equal(fresh[split]["images"], splits[split].images)
        assert torch.equal(fresh[split]["labels"], splits[split].labels)
    other = generate(**resolve_options({**SMALL, "seed": 1}))
    assert not torch.equal(other["train"]["images"], fresh["train"]["images"])


def test_growing_a_split_keeps_its_first_images_and_the_other_splits():
    small = render_split(0, "train", 130, 32, 1.0)  # past one chunk of 128
    big = render_split(0, "train", 300, 32, 1.0)
    assert torch.equal(big["images"][:130], small["images"]) and torch.equal(big["labels"][:130], small["labels"])
    a = generate(**resolve_options(SMALL))
    b = generate(**resolve_options({**SMALL, "n_train": 70}))
    assert torch.equal(a["val"]["images"], b["val"]["images"]) and torch.equal(a["test"]["images"], b["test"]["images"])


def test_classes_are_balanced(splits):
    train = splits["train"].labels
    assert torch.bincount(train, minlength=10).tolist() == [4] * 10
    for block in train.view(-1, 10):
        assert sorted(block.tolist()) == list(range(10))
    counts = torch.bincount(splits["test"].labels, minlength=10)
    assert int(counts.max() - counts.min()) <= 1
    shape = SynthObjects().inspect(None, SMALL)
    assert {s: v.counts for s, v in shape.items()} == {
        s: tuple(sorted(torch.bincount(splits[s].labels, minlength=10).tolist(), reverse=True)) for s in SPLITS}


def test_splits_share_no_image(splits):
    seen: dict[bytes, str] = {}
    for split in SPLITS:
        for image in splits[split].images:
            key = image.numpy().tobytes()
            assert seen.setdefault(key, split) == split, f"an image of {split} is also in {seen[key]}"
    assert len(seen) == sum(SMALL.values())


def test_variation_zero_draws_one_image_per_class():
    data = generate(**resolve_options({**SMALL, "variation": 0.0}))
    images, labels = data["train"]["images"], data["train"]["labels"]
    for c in range(10):
        same = images[labels == c]
        assert (same == same[0]).all()
    assert len({images[labels == c][0].numpy().tobytes() for c in range(10)}) == 10


def test_learnable_but_not_trivial(learn):
    """A logistic regression on 8 x 8 pixels beats chance (0.1) clearly but is far from perfect."""
    def features(split):
        x = F.avg_pool2d(learn[split]["images"].float() / 255, 4).flatten(1)
        return x, learn[split]["labels"]

    x, y = features("train")
    xt, yt = features("test")
    mean, std = x.mean(0), x.std(0) + 1e-3
    x, xt = (x - mean) / std, (xt - mean) / std
    centres = torch.stack([x[y == c].mean(0) for c in range(10)])
    ncm = (torch.cdist(xt, centres).argmin(1) == yt).float().mean().item()
    w = torch.zeros(x.shape[1], 10, requires_grad=True)
    b = torch.zeros(10, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=100)

    def closure():
        opt.zero_grad()
        loss = F.cross_entropy(x @ w + b, y) + 1e-3 * (w * w).sum()
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        accuracy = ((xt @ w + b).argmax(1) == yt).float().mean().item()
    assert 0.3 < accuracy < 0.95, accuracy
    assert 0.15 < ncm < 0.95, ncm


def test_defaults_generate_quickly():
    start = time.perf_counter()
    data = generate(**resolve_options({}))
    elapsed = time.perf_counter() - start
    assert sum(len(d["labels"]) for d in data.values()) == 5500
    assert elapsed < 10, f"generating the defaults took {elapsed:.1f} s"


def test_bad_options_are_one_line_errors():
    for bad, needle in (({"n_trian": 5}, "did you mean 'task.data.n_train'"), ({"n_val": 0}, "task.data.n_val"),
                        ({"variation": 5}, "task.data.variation"), ({"size": 4}, "task.data.size"),
                        ({"seed": 1.5}, "task.data.seed")):
        with pytest.raises(BenchError) as exc:
            SynthObjects().inspect(None, bad)
        assert needle in one_line(exc)
