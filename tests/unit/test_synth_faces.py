"""Synthetic faces: determinism, shapes, splits, attributes, boxes, variation, caching, speed."""

from __future__ import annotations

import time

import pytest
import torch

import bench.data.synthetic.synth_faces as synth
from bench.core.registry import datasets
from bench.data.synthetic.synth_faces import GENERATOR_VERSION, SynthFaces, generate, resolve_options
from bench.errors import BenchError

SMALL = {"n_ids": 12, "per_id": 3, "size": 32, "split_ids": (6, 3, 3)}


def small_generate(**changes):
    return generate(**resolve_options({**SMALL, **changes}))


@pytest.fixture(scope="module")
def splits(tmp_path_factory):
    return SynthFaces().load(None, SMALL, tmp_path_factory.mktemp("synth"))


@pytest.fixture(scope="module")
def data():
    return small_generate()


def test_registered_and_synthetic():
    assert datasets.get("synth_faces") is SynthFaces
    assert SynthFaces.synthetic and SynthFaces.layout
    assert isinstance(GENERATOR_VERSION, int)


def test_shapes_and_dtypes(splits):
    assert splits.synthetic and splits.dataset == "synth_faces"
    for name, n_ids in zip(("train", "val", "test"), SMALL["split_ids"]):
        s = splits[name]
        n = n_ids * SMALL["per_id"]
        assert s.images.shape == (n, 3, 32, 32) and s.images.dtype == torch.uint8
        assert s.labels.shape == (n,) and s.labels.dtype == torch.int64
        assert all(t.dtype == torch.int64 and t.shape == (n,) for t in s.attrs.values())
        assert len(s.boxes) == n
        assert all(b.shape == (1, 4) and b.dtype == torch.float32 for b in s.boxes)


def test_splits_are_identity_disjoint(splits):
    ids = {name: set(splits[name].labels.tolist()) for name in ("train", "val", "test")}
    assert [len(ids[n]) for n in ("train", "val", "test")] == list(SMALL["split_ids"])
    assert not ids["train"] & ids["val"] and not ids["train"] & ids["test"] and not ids["val"] & ids["test"]
    assert set().union(*ids.values()) == set(range(SMALL["n_ids"]))
    counts = torch.bincount(splits["train"].labels, minlength=SMALL["n_ids"])
    assert set(counts[counts > 0].tolist()) == {SMALL["per_id"]}


def test_default_split_sizes():
    assert resolve_options({})["split_ids"] == (200, 40, 60)
    assert sum(resolve_options({"n_ids": 31})["split_ids"]) == 31


def test_attributes_in_range_and_fixed_per_identity(splits):
    s = splits["train"]
    assert set(s.attr_names) == {"gender", "age_group", "skin_tone", "glasses"}
    for name, values in s.attrs.items():
        assert 0 <= int(values.min()) and int(values.max()) < len(s.attr_names[name])
    for identity in s.labels.unique():
        rows = s.labels == identity
        for name in ("gender", "age_group", "skin_tone"):
            assert s.attrs[name][rows].unique().numel() == 1


def test_boxes_inside_image_and_contain_face_centre(data):
    boxes, centres = data["boxes"], data["centres"]
    assert (boxes >= 0).all() and (boxes <= 32).all()
    assert (boxes[:, 2] - boxes[:, 0] > 8).all() and (boxes[:, 3] - boxes[:, 1] > 8).all()
    inside_x = (boxes[:, 0] < centres[:, 0]) & (centres[:, 0] < boxes[:, 2])
    inside_y = (boxes[:, 1] < centres[:, 1]) & (centres[:, 1] < boxes[:, 3])
    assert (inside_x & inside_y).all()


def test_face_is_drawn_inside_its_box():
    out = small_generate(variation=0.0, per_id=1, n_ids=6, split_ids=(2, 2, 2))
    for image, box in zip(out["images"].float(), out["boxes"]):
        x1, y1, x2, y2 = box.round().long().tolist()
        inner = image[:, y1 + 4 : y2 - 4, x1 + 4 : x2 - 4]
        background = image[:, :3, :3]
        assert (inner.mean((1, 2)) - background.mean((1, 2))).abs().max() > 10


def test_same_options_give_identical_tensors(data):
    again = small_generate()
    for key in ("images", "labels", "boxes"):
        assert torch.equal(data[key], again[key])
    assert all(torch.equal(data["attrs"][k], again["attrs"][k]) for k in data["attrs"])


def test_output_does_not_depend_on_thread_count(data):
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1 if threads > 1 else 2)
        again = small_generate()
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(data["images"], again["images"])
    assert torch.get_num_threads() == threads


def test_seed_changes_the_data(data):
    other = small_generate(seed=1)
    assert not torch.equal(data["images"], other["images"])


def test_variation_zero_repeats_each_identity():
    out = small_generate(variation=0.0)
    images = out["images"].view(SMALL["n_ids"], SMALL["per_id"], -1)
    assert (images == images[:, :1]).all()


def test_nuisance_grows_with_variation():
    spreads = []
    for variation in (0.0, 0.5, 1.0, 2.0):
        images = small_generate(variation=variation)["images"].float().view(SMALL["n_ids"], SMALL["per_id"], -1)
        spreads.append(float(images.std(1).mean()))
    assert spreads[0] == 0 and spreads == sorted(spreads) and spreads[3] > spreads[1] + 5


def test_identities_differ():
    out = small_generate(variation=0.0, per_id=1)
    flat = out["images"].float().flatten(1)
    distances = torch.cdist(flat, flat) + torch.eye(len(flat)) * 1e9
    assert float(distances.min()) > 100


def test_cache_is_reused(tmp_path, monkeypatch):
    first = SynthFaces().load(None, SMALL, tmp_path)
    entries = [p for p in (tmp_path / "datasets" / "synth_faces").iterdir() if not p.name.startswith(".")]
    assert len(entries) == 1 and (entries[0] / "MANIFEST.json").is_file()
    monkeypatch.setattr(synth, "generate", lambda **kw: pytest.fail("regenerated despite the cache"))
    second = SynthFaces().load(None, SMALL, tmp_path)
    assert second.fingerprint == first.fingerprint
    assert torch.equal(second["test"].images, first["test"].images)
    assert not list(tmp_path.rglob("*.tmp"))


def test_unreadable_cache_is_rebuilt(tmp_path, capsys):
    first = SynthFaces().load(None, SMALL, tmp_path)
    (path,) = (tmp_path / "datasets" / "synth_faces").glob("*/object.pt")
    path.write_bytes(b"truncated")
    second = SynthFaces().load(None, SMALL, tmp_path)
    assert torch.equal(second["train"].images, first["train"].images)
    assert second.fingerprint == first.fingerprint
    assert path.stat().st_size > 1000
    assert "is damaged" in capsys.readouterr().err


def test_fingerprint_covers_options(tmp_path):
    a = SynthFaces().load(None, SMALL, tmp_path).fingerprint
    b = SynthFaces().load(None, {**SMALL, "variation": 0.5}, tmp_path).fingerprint
    assert a != b


@pytest.mark.parametrize(
    "options",
    [{"colour": 1}, {"size": 16}, {"split_ids": (1, 2, 3)}, {"variation": -1}, {"n_ids": "many"}],
)
def test_bad_options_raise(options):
    with pytest.raises(BenchError):
        resolve_options(options)


def test_generation_speed():
    n_ids, per_id = 50, 20
    start = time.perf_counter()
    out = generate(**resolve_options({"n_ids": n_ids, "per_id": per_id, "split_ids": (30, 10, 10)}))
    seconds = time.perf_counter() - start
    rate = len(out["images"]) / seconds
    print(f"synth_faces: {len(out['images'])} images of 64x64 in {seconds:.2f} s ({rate:.0f}/s)")
    print(f"synth_faces: 300 ids x 20 images would take ~{6000 / rate:.1f} s here")
    assert out["images"].shape == (n_ids * per_id, 3, 64, 64)
