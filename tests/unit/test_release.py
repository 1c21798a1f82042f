"""Releases: batch-size independence, caching by content key, output checks."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bench.core.interfaces import Mechanism, RunContext
from bench.core.registry import mechanisms
from bench.data.base import ImageSet, Splits
from bench.release.dataset import apply_to_split, make_release, release_key


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


_FORGED = """
from bench.interfaces import Mechanism, ParamSpace


class Same(Mechanism):
    name = "same_name"
    version = 1
    params = ParamSpace()

    def apply(self, images, *, generator, boxes=None):
        return images{op}
"""


def _file_mechanism(path: Path, op: str, monkeypatch) -> type:
    import importlib.util
    import sys

    path.write_text(_FORGED.format(op=op))
    spec = importlib.util.spec_from_file_location(f"forged_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module.Same


def test_two_files_declaring_one_name_and_version_never_share_a_release_or_a_cell(tmp_path, monkeypatch):
    from bench.core.keys import cell_key, source_digest

    honest = _file_mechanism(tmp_path / "honest.py", " // 2", monkeypatch)
    forged = _file_mechanism(tmp_path / "forged.py", "", monkeypatch)
    assert source_digest(mechanisms.get("dp_pix")) == ""  # a shipped mechanism is keyed by its version
    assert source_digest(honest) != source_digest(forged) != ""
    splits = _splits()
    assert release_key(splits, honest(), 0) != release_key(splits, forged(), 0)
    keys = {cell_key("t", "same_name", 1, {}, 0, "smoke", {}, source_digest(m)) for m in (honest, forged)}
    assert len(keys) == 2
    assert cell_key("t", "dp_pix", 1, {}, 0, "smoke", {}, "") == cell_key("t", "dp_pix", 1, {}, 0, "smoke", {})


def test_a_mechanism_returning_the_wrong_dtype_is_reported(tmp_path):
    class Broken(Mechanism):
        def apply(self, images, *, generator, boxes=None):
            return images.float()

    with pytest.raises(RuntimeError, match="expected uint8"):
        apply_to_split(Broken(), _splits()["test"], _ctx(tmp_path), "release/test")


def test_detected_boxes_report_recall_against_the_dataset_boxes(tmp_path):
    from bench.data import load_dataset

    faces = load_dataset("synth_faces", None, {"n_ids": 6, "per_id": 2, "split_ids": [2, 2, 2]}, tmp_path)
    mech = mechanisms.get("face_overlay")()
    from_dataset = make_release(faces, mech, _ctx(tmp_path))
    detected = make_release(faces, mech, _ctx(tmp_path), boxes="detect")
    assert from_dataset.metrics == {}
    assert set(detected.metrics) == {"detector_recall.train", "detector_recall.val", "detector_recall.test"}
    assert all(0.0 <= v <= 1.0 for v in detected.metrics.values())
    assert detected.key != from_dataset.key
    assert make_release(faces, mech, _ctx(tmp_path), boxes="detect").metrics == detected.metrics


@pytest.mark.parametrize("hold_images", [1, 3, 100])
def test_a_release_held_on_the_device_is_the_release_sent_batch_by_batch(tmp_path, monkeypatch, hold_images):
    """Batches gathered before going to the host (as on an accelerator) give the same images, in order."""
    from bench.data.shards import SplitWriter, open_split
    from bench.release import dataset as release

    mech, split = mechanisms.get("dp_pix")(epsilon=1, block=2), _splits()["train"]
    expected, _ = apply_to_split(mech, split, _ctx(tmp_path), "release/train", batch=2)
    monkeypatch.setattr(release, "stays_on_device", lambda device: True)
    monkeypatch.setattr(release, "DEVICE_HOLD_BYTES", hold_images * 3 * 16 * 16)
    delivered: list[int] = []
    real = release._DeviceHold.flush

    def counting_flush(self):
        delivered.append(len(self.parts))
        real(self)

    monkeypatch.setattr(release._DeviceHold, "flush", counting_flush)
    held, _ = apply_to_split(mech, split, _ctx(tmp_path), "release/train", batch=2)
    assert torch.equal(held, expected)
    # 5 batches of 2: a copy to the host once the held images reach hold_images (the last one empty or partial)
    batches_per_copy = max(1, -(-hold_images // 2))
    assert sum(delivered) == 5 and max(delivered) == min(5, batches_per_copy)
    sink = SplitWriter(tmp_path / "sunk", (3, 16, 16))
    assert apply_to_split(mech, split, _ctx(tmp_path), "release/train", batch=2, sink=sink)[0] is None
    sink.close()
    assert torch.equal(open_split(tmp_path / "sunk", (3, 16, 16))[:], expected)


def test_an_accelerator_batch_holds_more_images_on_the_device(tmp_path, monkeypatch):
    """With no batch named, a resident release takes DEVICE_BATCH_VALUES values a batch (at least BATCH images)."""
    from bench.release import dataset as release

    seen: list[int] = []

    class Spy(Mechanism):
        def apply(self, images, *, generator, boxes=None):
            seen.append(len(images))
            return images.clone()

    split = ImageSet(torch.zeros(2500, 3, 4, 4, dtype=torch.uint8), torch.zeros(2500, dtype=torch.long))
    apply_to_split(Spy(), split, _ctx(tmp_path), "spy")
    assert seen == [1024, 1024, 452]
    seen.clear()
    monkeypatch.setattr(release, "stays_on_device", lambda device: True)
    monkeypatch.setattr(release, "DEVICE_BATCH_VALUES", 48 * 2000)
    apply_to_split(Spy(), split, _ctx(tmp_path), "spy")
    assert seen == [2000, 500]


def test_only_the_cpu_sends_each_batch_to_the_host_as_it_comes():
    from bench.release.dataset import stays_on_device

    assert not stays_on_device(torch.device("cpu"))
    assert all(stays_on_device(torch.device(kind)) for kind in ("cuda", "cuda:1", "mps", "xpu"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name,params", [("dp_pix", {"epsilon": 1, "block": 2}), ("gaussian_noise", {"sigma": 20.0}),
                                         ("pixelate", {"block": 4})])
def test_a_cuda_release_held_on_the_gpu_equals_one_sent_to_the_host_batch_by_batch(tmp_path, monkeypatch, name, params):
    from bench.release import dataset as release

    ctx = RunContext(device=torch.device("cuda"), seed=0, profile="smoke", data_root=None, cache_dir=tmp_path)
    mech, split = mechanisms.get(name)(**params), _splits()["train"]
    held, _ = apply_to_split(mech, split, ctx, "release/train", batch=3)
    monkeypatch.setattr(release, "DEVICE_HOLD_BYTES", 1)  # every batch goes to the host on its own
    sent, _ = apply_to_split(mech, split, ctx, "release/train", batch=3)
    assert held.device.type == "cpu" and torch.equal(held, sent)
