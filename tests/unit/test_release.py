"""Releases: batch-size independence, caching by content key, output checks."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bench.datasets.base import ImageSet, Splits
from bench.interfaces import Mechanism, RunContext
from bench.registry import mechanisms
from bench.release import apply_to_split, make_release, release_key


def _splits() -> Splits:
    g = torch.Generator().manual_seed(0)
    sets = {name: ImageSet(torch.randint(0, 256, (n, 3, 16, 16), dtype=torch.uint8, generator=g), torch.arange(n))
            for name, n in (("train", 10), ("test", 7))}
    return Splits("toy", sets, fingerprint="toy-fp")


def _ctx(tmp_path: Path, seed: int = 0) -> RunContext:
    return RunContext(device=torch.device("cpu"), seed=seed, profile="smoke", data_root=None, cache_dir=tmp_path)


def test_release_does_not_depend_on_batch_size(tmp_path):
    mech = mechanisms.get("dp_pix")(epsilon=1, block=2)
    split = _splits()["train"]
    whole, _ = apply_to_split(mech, split, _ctx(tmp_path), "release/train", batch=10)
    chunked, _ = apply_to_split(mech, split, _ctx(tmp_path), "release/train", batch=3)
    assert torch.equal(whole, chunked)


def test_release_is_cached_by_content_key(tmp_path):
    splits = _splits()
    mech = mechanisms.get("dp_pix")(epsilon=1, block=2)
    first = make_release(splits, mech, _ctx(tmp_path))
    cached = [p for p in (tmp_path / "releases").iterdir() if not p.name.startswith(".")]
    assert [p.name for p in cached] == [first.key]
    again = make_release(splits, mech, _ctx(tmp_path))
    assert all(torch.equal(first.splits[s].images, again.splits[s].images) for s in ("train", "test"))
    assert torch.equal(first.splits["test"].labels, splits["test"].labels)
    other_seed = release_key(splits, mech, 1)
    other_params = release_key(splits, mechanisms.get("dp_pix")(epsilon=2, block=2), 0)
    assert len({first.key, other_seed, other_params}) == 3
    assert first.claim is not None and first.claim.epsilon == 1


def test_a_mechanism_returning_the_wrong_dtype_is_reported(tmp_path):
    class Broken(Mechanism):
        def apply(self, images, *, generator, boxes=None):
            return images.float()

    with pytest.raises(RuntimeError, match="expected uint8"):
        apply_to_split(Broken(), _splits()["test"], _ctx(tmp_path), "release/test")


def test_detected_boxes_report_recall_against_the_dataset_boxes(tmp_path):
    from bench.datasets import load_dataset

    faces = load_dataset("synth_faces", None, {"n_ids": 6, "per_id": 2, "split_ids": [2, 2, 2]}, tmp_path)
    mech = mechanisms.get("face_overlay")()
    from_dataset = make_release(faces, mech, _ctx(tmp_path))
    detected = make_release(faces, mech, _ctx(tmp_path), boxes="detect")
    assert from_dataset.metrics == {}
    assert set(detected.metrics) == {"detector_recall.train", "detector_recall.val", "detector_recall.test"}
    assert all(0.0 <= v <= 1.0 for v in detected.metrics.values())
    assert detected.key != from_dataset.key
    assert make_release(faces, mech, _ctx(tmp_path), boxes="detect").metrics == detected.metrics
