"""Synthetic scenes: options, cheap inspect, determinism, shapes, people rates, face boxes, fractions, separability."""

from __future__ import annotations

import time

import pytest
import torch
import torch.nn.functional as F

import bench.data.synthetic.synth_scenes as scenes
from bench.core.registry import datasets
from bench.data.synthetic.synth_faces import ATTR_NAMES
from bench.data.synthetic.synth_scenes import (
    GENERATOR_VERSION,
    SPLITS,
    SynthScenes,
    design_classes,
    generate,
    resolve_options,
)
from bench.errors import BenchError

SMALL = {"classes": 100, "images_per_class": 2, "val_per_class": 1, "test_per_class": 1}
PER_CLASS = {"train": 2, "val": 1, "test": 1}


@pytest.fixture(scope="module")
def splits(tmp_path_factory):
    return SynthScenes().load(None, SMALL, tmp_path_factory.mktemp("scenes"))


def one_line(exc: pytest.ExceptionInfo) -> str:
    assert "\n" not in str(exc.value)
    return str(exc.value)


def test_registered_and_synthetic():
    assert datasets.get("synth_scenes") is SynthScenes
    assert SynthScenes.synthetic and SynthScenes.layout and isinstance(GENERATOR_VERSION, int)


def test_inspect_is_cheap_and_has_100_classes_by_default(monkeypatch):
    monkeypatch.setattr(scenes, "generate", lambda **_: pytest.fail("inspect rendered"))
    monkeypatch.setattr(scenes, "render_split", lambda *_, **__: pytest.fail("inspect rendered"))
    start = time.perf_counter()
    shape = SynthScenes().inspect(None, {})
    assert time.perf_counter() - start < 0.5
    assert set(shape) == set(SPLITS)
    assert len(shape["train"].counts) >= 100 and set(shape["train"].counts) == {50}
    assert shape["train"].images == 5000 and shape["val"].images == shape["test"].images == 1000


def test_inspect_agrees_with_the_loaded_splits(splits):
    shape = SynthScenes().inspect(None, SMALL)
    for s in SPLITS:
        counts = torch.bincount(splits[s].labels, minlength=SMALL["classes"])
        assert shape[s].counts == tuple(sorted(counts.tolist(), reverse=True))
        assert shape[s].images == len(splits[s]) == SMALL["classes"] * PER_CLASS[s]


def test_shapes_dtypes_and_info(splits):
    assert splits.synthetic and splits.dataset == "synth_scenes"
    info = splits.info
    assert len(info["classes"]) == 100 and len(set(info["classes"])) == 100
    for s in SPLITS:
        d = splits[s]
        n = len(d)
        assert d.images.shape == (n, 3, 128, 128) and d.images.dtype == torch.uint8
        assert d.labels.dtype == torch.int64 and int(d.labels.max()) < 100
        assert len(d.boxes) == n and all(b.dtype == torch.float32 and b.dim() == 2 and b.shape[1] == 4
                                         for b in d.boxes)
        assert set(d.attrs) == {"n_faces", "identity", "gender", "age_group", "skin_tone", "glasses"}
        assert all(v.dtype == torch.int64 and v.shape == (n,) for v in d.attrs.values())
        assert d.attr_names == {k: list(v) for k, v in ATTR_NAMES.items()}
        assert info["object_boxes"][s].shape == (n, 4) and info["object_boxes"][s].dtype == torch.float32
        for key in ("face_fraction", "image_face_fraction"):
            assert info[key][s].shape == (n,) and info[key][s].dtype == torch.float32
        faces = info["faces"][s]
        f = int(d.attrs["n_faces"].sum())
        assert info["n_faces"][s] == f and faces["box"].shape == (f, 4)
        assert all(faces[k].shape == (f,) and faces[k].dtype == torch.int64
                   for k in ("image", "identity", "gender", "age_group", "skin_tone", "glasses"))
    other = generate(**resolve_options({"classes": 2, "images_per_class": 1, "size": 64}))
    assert other["train"]["images"].shape == (2, 3, 64, 64)


def test_deterministic_whatever_the_threads_and_seeded(splits, tmp_path):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        again = SynthScenes().load(None, SMALL, tmp_path)
    finally:
        torch.set_num_threads(threads)
    cached = SynthScenes().load(None, SMALL, tmp_path)  # read back from the cache
    assert again.fingerprint == splits.fingerprint == cached.fingerprint
    assert torch.equal(cached.info["faces"]["train"]["box"], splits.info["faces"]["train"]["box"])
    for s in SPLITS:
        assert torch.equal(again[s].images, splits[s].images) and torch.equal(again[s].labels, splits[s].labels)
        assert torch.equal(cached[s].images, splits[s].images) and torch.equal(cached[s].attrs["identity"],
                                                                               splits[s].attrs["identity"])
        assert all(torch.equal(a, b) for a, b in zip(again[s].boxes, splits[s].boxes))
        assert torch.equal(again.info["face_fraction"][s], splits.info["face_fraction"][s])
    other = generate(**resolve_options({**SMALL, "classes": 2, "images_per_class": 1, "seed": 1}))
    assert not torch.equal(other["train"]["images"], splits["train"].images[:2])


def test_a_larger_split_appends_images():
    design = design_classes(0, 10)
    ident = scenes.synth_faces.sample_identities(20, torch.Generator().manual_seed(0))
    small = scenes.render_split(0, "train", 70, 64, design, ident)  # past one chunk of 64
    big = scenes.render_split(0, "train", 130, 64, design, ident)
    assert torch.equal(big["images"][:70], small["images"]) and torch.equal(big["labels"][:70], small["labels"])
    assert torch.equal(big["face_fraction"][:70], small["face_fraction"])


def test_person_rates_span_zero_to_095():
    design = design_classes(0, 100)
    rate = design["person_rate"]
    assert float(rate.min()) == 0.0 and abs(float(rate.max()) - 0.95) < 1e-6
    assert 0.08 <= float((rate > 0.5).float().mean()) <= 0.25  # ImageNet: 10.6% of classes above 50%
    assert 0.1 <= float(rate.mean()) <= 0.3  # ImageNet: 17% of images have faces
    assert not torch.equal(rate, design_classes(1, 100)["person_rate"])
    combos = torch.stack([design[k] for k in ("family", "texture", "hue", "background")], 1)
    differ = (combos.unsqueeze(0) != combos.unsqueeze(1)).sum(-1) + 4 * torch.eye(100, dtype=torch.long)
    assert int(differ.min()) >= 2  # two classes differ in at least two of shape, texture, colour, background


def test_people_follow_their_class_rate(splits):
    rate = torch.tensor(splits.info["person_rate"])
    for s in SPLITS:
        d = splits[s]
        n_faces = d.attrs["n_faces"]
        assert int(n_faces.max()) <= 3 and int(n_faces.min()) >= 0
        assert int(n_faces[rate[d.labels] == 0].sum()) == 0
    labels = torch.cat([splits[s].labels for s in SPLITS])
    with_people = torch.cat([(splits[s].attrs["n_faces"] > 0).float() for s in SPLITS])
    high, low = rate[labels] > 0.6, rate[labels] < 0.05
    assert float(with_people[high].mean()) > 0.5 and float(with_people[low].mean()) < 0.1


def test_face_boxes_are_big_enough_inside_and_match_the_face_table(splits):
    total = 0
    for s in SPLITS:
        d, faces = splits[s], splits.info["faces"][s]
        boxes = torch.cat(d.boxes)
        total += len(boxes)
        if not len(boxes):
            continue
        w, h = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
        assert float(torch.minimum(w, h).min()) >= 24.0
        assert float(boxes.min()) >= 0.0 and float(boxes[:, 2:].max()) <= 128.0
        assert torch.equal(faces["box"], boxes)
        assert torch.equal(torch.bincount(faces["image"], minlength=len(d)), d.attrs["n_faces"])
        for i in d.attrs["n_faces"].nonzero().flatten().tolist():
            rows = (faces["image"] == i).nonzero().flatten()
            ids = faces["identity"][rows]
            assert len(set(ids.tolist())) == len(ids)  # nobody twice in one image
            assert int(d.attrs["identity"][i]) == int(ids[0])
            assert int(d.attrs["gender"][i]) == int(faces["gender"][rows[0]])
            widths = (faces["box"][rows, 2] - faces["box"][rows, 0]).tolist()
            assert widths == sorted(widths, reverse=True)  # largest face first
        none = d.attrs["n_faces"] == 0
        assert all(bool((d.attrs[k][none] == -1).all()) for k in ("identity", "gender", "age_group", "skin_tone"))
    assert total >= 40
    faces = {k: torch.cat([splits.info["faces"][s][k] for s in SPLITS]) for k in ("identity", "gender", "skin_tone")}
    for person in faces["identity"].unique().tolist():  # an identity keeps its demographics everywhere
        mine = faces["identity"] == person
        assert len(faces["gender"][mine].unique()) == 1 and len(faces["skin_tone"][mine].unique()) == 1


def test_object_boxes_and_face_fractions(splits):
    for s in SPLITS:
        d, info = splits[s], splits.info
        obj = info["object_boxes"][s]
        assert bool(((obj[:, 2] > obj[:, 0]) & (obj[:, 3] > obj[:, 1])).all())
        assert float(obj.min()) >= 0 and float(obj.max()) <= 128
        frac, image_frac = info["face_fraction"][s], info["image_face_fraction"][s]
        assert float(frac.min()) >= 0 and float(frac.max()) <= 1 and float(image_frac.max()) <= 1
        none = d.attrs["n_faces"] == 0
        assert bool((frac[none] == 0).all()) and bool((image_frac[none] == 0).all())
        for i in (~none).nonzero().flatten()[:6].tolist():  # against a rasterised union at 1/8 pixel
            ys = xs = (torch.arange(128 * 8) + 0.5) / 8
            inside = torch.zeros(len(ys), len(xs), dtype=torch.bool)
            for x1, y1, x2, y2 in d.boxes[i].tolist():
                rows, cols = (ys >= y1) & (ys < y2), (xs >= x1) & (xs < x2)
                inside |= rows.view(-1, 1) & cols.view(1, -1)
            x1, y1, x2, y2 = (int(v * 8) for v in obj[i].tolist())
            assert abs(float(inside[y1:y2, x1:x2].float().mean()) - float(frac[i])) < 0.02
            assert abs(float(inside.float().mean()) - float(image_frac[i])) < 0.01
    held = torch.tensor(splits.info["near_face"]) > 0.5
    frac = torch.cat([splits.info["face_fraction"][s] for s in SPLITS])
    labels = torch.cat([splits[s].labels for s in SPLITS])
    people = torch.cat([splits[s].attrs["n_faces"] > 0 for s in SPLITS])
    assert float(frac[held[labels] & people].mean()) > float(frac[~held[labels] & people].mean())


def test_classes_are_separable_by_nearest_class_mean():
    """Nearest class mean on 16 x 16 pixels beats chance (1/20) by a wide margin."""
    data = generate(**resolve_options({"classes": 20, "images_per_class": 12, "val_per_class": 1,
                                       "test_per_class": 5}))

    def features(split):
        return F.avg_pool2d(data[split]["images"].float() / 255, 8).flatten(1), data[split]["labels"]

    x, y = features("train")
    xt, yt = features("test")
    mean, std = x.mean(0), x.std(0) + 1e-3
    x, xt = (x - mean) / std, (xt - mean) / std
    centres = torch.stack([x[y == c].mean(0) for c in range(20)])
    accuracy = (torch.cdist(xt, centres).argmin(1) == yt).float().mean().item()
    assert accuracy > 0.2, accuracy  # 0.35 with seed 0


def test_generation_is_fast():
    start = time.perf_counter()
    data = scenes.render_split(0, "train", 128, 128, design_classes(0, 100),
                               scenes.synth_faces.sample_identities(10, torch.Generator().manual_seed(0)))
    assert data["images"].shape[0] == 128
    assert time.perf_counter() - start < 6.0  # about 0.4 s on one core: 100 classes x 50 images in ~16 s


def test_bad_options_are_one_line_errors():
    for bad, needle in (({"clases": 5}, "did you mean 'task.data.classes'"), ({"classes": 1}, "task.data.classes"),
                        ({"classes": 5000}, "task.data.classes"), ({"size": 32}, "task.data.size"),
                        ({"images_per_class": 0}, "task.data.images_per_class"),
                        ({"identities": 2}, "task.data.identities"), ({"seed": 1.5}, "task.data.seed")):
        with pytest.raises(BenchError) as exc:
            SynthScenes().inspect(None, bad)
        assert needle in one_line(exc)
