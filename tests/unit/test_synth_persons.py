"""Synthetic pedestrians: Market-like splits, determinism, caching, appearance cues."""

from __future__ import annotations

import pytest
import torch

import bench.data.synthetic._person_draw as pd
import bench.data.synthetic.synth_persons as sp
from bench.core.registry import datasets
from bench.data.synthetic._person_draw import draw_people, draw_shots
from bench.data.synthetic._person_render import render
from bench.data.synthetic.synth_persons import SynthPersons, plan, resolve_options
from bench.errors import BenchError
from bench.randomness.seeding import make_generator
from tasks.reid_metrics import evaluate_rank

SMALL = {"n_ids": 16, "per_id": 8}


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return SynthPersons().load(None, SMALL, tmp_path_factory.mktemp("cache"))


def test_registered_and_synthetic(small):
    assert datasets.get("synth_persons") is SynthPersons
    assert SynthPersons.synthetic and small.synthetic and small.dataset == "synth_persons"
    assert small.info["generator_version"] == sp.GENERATOR_VERSION


def test_defaults():
    options = resolve_options({})
    assert options["n_ids"] == 500 and options["per_id"] == 16 and options["seed"] == 0


def test_images_and_labels(small):
    for s in small.sets.values():
        assert s.images.dtype == torch.uint8 and s.images.shape[1:] == (3, 128, 64)
        assert s.labels.dtype == torch.int64 and s.cams.dtype == torch.int64
        assert s.cams.min() >= 0 and s.cams.max() <= 5
        assert s.attr_names == {"gender": ["male", "female"], "age": ["young", "teenager", "adult", "old"]}
    train = small["train"]
    assert sorted(set(train.labels.tolist())) == list(range(8))
    assert len(train) == 8 * 8


def test_market_protocol(small):
    q, g = small["query"], small["gallery"]
    assert q.labels.min() >= 1
    gallery = list(zip(g.labels.tolist(), g.cams.tolist()))
    pairs = list(zip(q.labels.tolist(), q.cams.tolist()))
    assert len(pairs) == len(set(pairs)), "one query per identity and camera"
    for pid, cam in pairs:
        assert any(p == pid and c != cam for p, c in gallery), "every query has a cross-camera match"
    people = g.labels[g.labels > 0]
    assert set(people.tolist()) == set(q.labels.tolist())
    junk, distractors = int((g.labels == -1).sum()), int((g.labels == 0).sum())
    assert junk == round(0.2 * len(people)) and distractors == round(0.15 * len(people))
    for name in ("gender", "age"):
        assert (g.attrs[name][g.labels <= 0] == -1).all()
        assert (g.attrs[name][g.labels > 0] >= 0).all()
    for pid in set(q.labels.tolist()):
        values = torch.cat([q.attrs["gender"][q.labels == pid], g.attrs["gender"][g.labels == pid]])
        assert values.unique().numel() == 1


def test_plan_keeps_identities_apart_and_spread_over_cameras():
    layout = plan(30, 9, 0.2, 0.15, make_generator(0, "test"))
    pid, cam, split = layout["pid"], layout["cam"], layout["split"]
    train = set(pid[split == 0].tolist())
    test = set(pid[(split > 0) & (pid > 0)].tolist())
    assert not train & test and len(train) == 15 and len(test) == 15
    for p in range(1, 31):
        mine = pid == p
        assert int(mine.sum()) == 9
        assert cam[mine].unique().numel() >= 2


def test_oracle_distances_score_perfectly(small):
    q, g = small["query"], small["gallery"]
    dist = (q.labels[:, None] != g.labels[None, :]).float()
    cmc, mAP = evaluate_rank(dist, q.labels, g.labels, q.cams, g.cams, max_rank=10)
    assert mAP == 1.0 and cmc[0] == 1.0


def test_appearance_carries_identity(small):
    def strips(images):
        x = images[..., 24:40].float() / 255
        return x.reshape(len(x), 3, 8, 16, 16).mean((3, 4)).flatten(1)

    q, g = small["query"], small["gallery"]
    dist = torch.cdist(strips(q.images), strips(g.images))
    _, mAP = evaluate_rank(dist, q.labels, g.labels, q.cams, g.cams)
    shuffled = torch.rand(dist.shape, generator=torch.Generator().manual_seed(0))
    _, chance = evaluate_rank(shuffled, q.labels, g.labels, q.cams, g.cams)
    assert mAP > 2.5 * chance


def test_deterministic_and_seeded(tmp_path):
    a = sp.generate(resolve_options({"n_ids": 6, "per_id": 4}))[0]
    b = sp.generate(resolve_options({"n_ids": 6, "per_id": 4}))[0]
    c = sp.generate(resolve_options({"n_ids": 6, "per_id": 4, "seed": 1}))[0]
    for split in a:
        assert torch.equal(a[split].images, b[split].images)
        assert torch.equal(a[split].labels, b[split].labels)
    assert not torch.equal(a["train"].images, c["train"].images)


def test_cache_and_fingerprint(tmp_path, monkeypatch):
    options = {"n_ids": 6, "per_id": 4}
    first = SynthPersons().load(None, options, tmp_path)
    assert len(list((tmp_path / "datasets" / "synth_persons").glob("*/MANIFEST.json"))) == 1

    def boom(*args, **kwargs):
        raise AssertionError("generated again")

    monkeypatch.setattr(sp, "generate", boom)
    again = SynthPersons().load(None, options, tmp_path)
    assert again.fingerprint == first.fingerprint
    assert torch.equal(again["gallery"].images, first["gallery"].images)
    assert SynthPersons().load(None, {**options, "seed": 0}, tmp_path).fingerprint == first.fingerprint
    monkeypatch.setattr(sp, "GENERATOR_VERSION", sp.GENERATOR_VERSION + 1)
    with pytest.raises(AssertionError, match="generated again"):
        SynthPersons().load(None, options, tmp_path)


def test_size_option(tmp_path):
    splits = SynthPersons().load(None, {"n_ids": 4, "per_id": 4, "size": [64, 32]}, tmp_path)
    assert splits["query"].images.shape[1:] == (3, 64, 32)


@pytest.mark.parametrize(
    "options, match",
    [({"n_ids": 3}, "n_ids"), ({"per_id": 2}, "per_id"), ({"junk_frac": 1.5}, "junk_frac"),
     ({"seed": -1}, "seed"), ({"n_id": 10}, "unknown option"), ({"size": "big"}, "size")],
)
def test_bad_options(options, match, tmp_path):
    with pytest.raises(BenchError, match=match):
        SynthPersons().load(None, options, tmp_path)


def test_attributes_shape_appearance():
    people = draw_people(4000, make_generator(0, "test"))
    female, long_hair = people["female"], people["hair_long"]
    assert long_hair[female].float().mean() > 0.6 > 0.15 > long_hair[~female].float().mean()
    assert (people["lower_type"][~female] != pd.SKIRT).all() and (people["lower_type"][female] == pd.SKIRT).any()
    grey = (people["hair_colour"] - pd.GREY_HAIR).abs().max(1).values < 0.15
    old = people["age"] == pd.OLD
    assert grey[old].float().mean() > 0.5 and grey[~old].float().mean() < 0.05
    assert people["head"][people["age"] == pd.YOUNG].mean() > people["head"][people["age"] == pd.ADULT].mean()


MAGENTA = torch.tensor([1.0, 0.0, 1.0])


def magenta_pixels(images):
    r, g, b = images.int().unbind(1)
    return ((r > 150) & (b > 150) & (g < 80)).sum((1, 2))


def one_person_three_views(**overrides):
    people = draw_people(1, make_generator(0, "person"))
    people.update(overrides)
    people = {k: v.expand(3, *v.shape[1:]).clone() for k, v in people.items()}
    shots = draw_shots(torch.full((3,), 5), make_generator(0, "shots"))
    shots["view"] = torch.tensor([pd.FRONT, pd.BACK, pd.SIDE])
    shots["clutter"].zero_()
    return render(people, shots, make_generator(0, "noise"))


def test_backpack_is_a_box_from_the_back_and_straps_from_the_front():
    grey = torch.full((1, 3), 0.5)
    plain = {"upper": grey, "upper2": grey, "bag": torch.tensor([False]), "hat": torch.tensor([False])}
    front, back, side = magenta_pixels(one_person_three_views(
        backpack=torch.tensor([True]), backpack_colour=MAGENTA[None], **plain)).tolist()
    assert back > side > front > 0
    without = one_person_three_views(backpack=torch.tensor([False]), backpack_colour=MAGENTA[None], **plain)
    assert magenta_pixels(without).sum() == 0


def test_logo_shows_only_from_the_front():
    front, back, side = magenta_pixels(one_person_three_views(
        pattern=torch.tensor([pd.LOGO]), upper2=MAGENTA[None], upper=torch.full((1, 3), 0.5),
        backpack=torch.tensor([False]), bag=torch.tensor([False]))).tolist()
    assert front > 0 and back == 0 and side == 0
