"""The identity-linkage adversary: exact chance levels, linkage above chance on clean people, privacy of a release."""

from __future__ import annotations

import pytest
import torch
from fixtures.reid_fixtures import write_market_people

from attacks.identity_linkage import IdentityLinkage, chance_levels
from bench.core import scores
from bench.core.interfaces import Release, RunContext
from bench.core.splits import SplitShape
from bench.data.base import load_dataset
from bench.errors import BenchError
from tasks.reid_metrics import evaluate_rank, random_ranking

SETTINGS = {"epochs": 6, "input_size": [32, 16], "p": 4, "k": 3}


def test_random_ranking_is_the_mean_over_random_orders():
    q_pids, q_cams = torch.tensor([1, 1, 2, 3, 4]), torch.tensor([0, 1, 0, 1, 0])
    g_pids = torch.tensor([1, 1, 1, 2, 2, 3, -1, 0, 0, 5, 5, 5])  # junk, distractors; pid 4 has no match
    g_cams = torch.tensor([0, 1, 2, 1, 0, 0, 1, 0, 1, 0, 1, 2])
    top1, ap = random_ranking(q_pids, g_pids, q_cams, g_cams)
    assert torch.isnan(ap[4]) and torch.isnan(top1[4])
    # query 0 (pid 1, camera 0): 2 correct matches (cameras 1, 2) among 2 + 8 candidates (its camera-0 image and junk out)
    assert top1[0].item() == pytest.approx(2 / 10)
    g = torch.Generator().manual_seed(0)
    draws = [evaluate_rank(torch.rand(5, 12, generator=g), q_pids, g_pids, q_cams, g_cams) for _ in range(4000)]
    assert sum(m for _, m in draws) / len(draws) == pytest.approx(float(ap[:4].mean()), abs=0.01)
    assert sum(float(c[0]) for c, _ in draws) / len(draws) == pytest.approx(float(top1[:4].mean()), abs=0.01)


@pytest.fixture(scope="module")
def people(tmp_path_factory):
    root = tmp_path_factory.mktemp("people")
    write_market_people(root, n_train=12, n_test=12, cams=2, per_cam=3)
    cache = tmp_path_factory.mktemp("cache")
    clean = load_dataset("market1501", root, {"size": [64, 32]}, cache)
    ctx = RunContext(device=torch.device("cpu"), seed=0, profile="smoke", data_root=root, cache_dir=cache)
    return clean, ctx


def _release(clean, images: dict[str, torch.Tensor], key: str) -> Release:
    return Release(splits=clean.replace_images(images), mechanism="test_release", params={}, seed=0, key=key)


def test_linkage_beats_chance_on_clean_people_and_a_blank_release_leaves_nothing(people):
    clean, ctx = people
    attack = IdentityLinkage("smoke", SETTINGS)
    identity = Release(splits=clean, mechanism="identity", params={}, seed=0, key="clean")
    outcome = attack.run(clean, identity, ctx)
    metrics = outcome.metrics
    assert outcome.trials == metrics["queries"] == 24  # one query per test person and camera, each with a match
    assert (metrics["chance"], metrics["chance_map"]) == pytest.approx(chance_levels(clean["query"], clean["gallery"]))
    assert metrics["chance"] == pytest.approx(2 / (2 + 11 * 4))  # its 2 other-camera images among 46 candidates
    assert outcome.value == outcome.clean and metrics["map"] == metrics["map_clean"] > metrics["chance_map"]
    assert scores.is_significant(outcome.clean, outcome.chance, outcome.trials)
    assert outcome.privacy() == 0.0

    blank = _release(clean, {name: torch.zeros_like(s.images) for name, s in clean.sets.items()}, "blank")
    destroyed = attack.run(clean, blank, ctx)
    assert destroyed.clean == outcome.clean and destroyed.chance == outcome.chance
    # Identical queries rank the gallery alike, so at best the two queries of the person ranked first are linked.
    best = 2 / 24 + 1e-6  # top-1 is a float32 fraction
    assert destroyed.value <= best
    assert destroyed.privacy() >= 1 - (best - outcome.chance) / (outcome.clean - outcome.chance) > 0.9


def test_the_released_queries_are_linked_to_the_clean_gallery(people):
    clean, ctx = people
    attack = IdentityLinkage("smoke", SETTINGS)
    gallery_only = {name: s.images.clone() for name, s in clean.sets.items()}
    gallery_only["gallery"] = torch.zeros_like(gallery_only["gallery"])  # the release's gallery is never looked at
    outcome = attack.run(clean, _release(clean, gallery_only, "gallery-blanked"), ctx)
    assert outcome.value == outcome.clean


def test_check_data_names_the_setting_to_change():
    shape = {"train": SplitShape.of_labels([1, 1, 2, 2, 3, 3], cameras=[0, 1] * 3),
             "query": SplitShape.of_labels([7, 8], cameras=[0, 0]),
             "gallery": SplitShape.of_labels([7, 8], cameras=[1, 1])}
    with pytest.raises(BenchError, match="set identity_linkage.p=3"):
        IdentityLinkage("smoke", {"p": 4}).check_data(shape)
    IdentityLinkage("smoke", {"p": 3}).check_data(shape)
    same_camera = dict(shape, gallery=SplitShape.of_labels([7, 8], cameras=[0, 0]))
    with pytest.raises(BenchError, match="nothing to link"):
        IdentityLinkage("smoke", {"p": 3}).check_data(same_camera)
    with pytest.raises(BenchError, match="no 'query' or 'gallery' split"):
        IdentityLinkage("smoke", {"p": 3}).check_data({"train": shape["train"], "test": shape["query"]})
