"""Results by demographic group: which groups, sizes, CIs, privacy per group, gaps, episodes within a group."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bench.cell.report import format_groups
from bench.core import groups as g
from bench.core import scores
from tasks.episodes import group_episode_accuracies


def test_demographic_groups_take_labelled_demographics_only():
    attrs = {"gender": torch.tensor([0, 1, 1, -1]), "smiling": torch.tensor([0, 1, 0, 1]),
             "age_group": torch.tensor([2, 2, 2, 2])}
    found = g.demographic_groups(attrs, {"gender": ["female", "male"], "age_group": ["a", "b", "c"]})
    assert list(found) == ["gender"]  # smiling is no demographic; one age group is no slicing
    assert found["gender"]["female"].tolist() == [True, False, False, False]
    assert found["gender"]["male"].tolist() == [False, True, True, False]  # -1 is in no group
    assert g.demographic_groups(attrs, {}, exclude=("gender",)) == {}


def test_small_groups_show_their_size_and_no_number():
    groups = {"gender": {"female": np.arange(30) < 25, "male": np.arange(30) >= 25}}
    values = np.r_[np.ones(20), np.zeros(5), np.ones(5)]
    table = g.mean_groups(values, groups, "acc", min_size=20)
    female = table["gender"]["female"]
    assert female["n"] == 25 and female["acc"] == pytest.approx(0.8)
    assert female["acc_ci95"] == pytest.approx(1.96 * np.std(values[:25], ddof=1) / 5)
    assert table["gender"]["male"] == {"n": 5, "flag": g.TOO_SMALL}


def test_attack_privacy_per_group_uses_the_groups_own_clean_and_chance():
    n = 200
    groups = {"skin_tone": {"light": np.arange(n) < 100, "dark": np.arange(n) >= 100}}
    released = np.r_[np.ones(60), np.zeros(40), np.ones(10), np.zeros(90)]
    clean = np.r_[np.ones(90), np.zeros(10), np.ones(30), np.zeros(70)]
    out = g.attack_groups(released, clean, 0.1, groups, "top1")
    light, dark = out["table"]["skin_tone"]["light"], out["table"]["skin_tone"]["dark"]
    assert out["metric"] == "top1" and light["chance"] == pytest.approx(0.1)
    assert light["privacy"] == pytest.approx(scores.privacy_score(0.6, 0.9, 0.1, 100))
    assert dark["privacy"] == pytest.approx(1.0)  # released top-1 at chance in a group the clean attack reaches
    weak = g.attack_groups(np.zeros(n), np.r_[np.zeros(100), np.full(100, 0.1)], 0.1, groups, "top1")
    assert weak["table"]["skin_tone"]["dark"]["privacy"] is None
    assert weak["table"]["skin_tone"]["dark"]["flag"] == scores.TOO_WEAK


def test_largest_gap_and_its_ci_and_the_worst_group():
    table = {"gender": {"f": {"n": 50, "top1": 0.7, "top1_ci95": 0.03, "privacy": 0.2},
                        "m": {"n": 50, "top1": 0.4, "top1_ci95": 0.04, "privacy": 0.6},
                        "x": {"n": 3, "flag": g.TOO_SMALL}}}
    gap = g.largest_gaps(table, "top1")["gender"]
    assert gap["gap"] == pytest.approx(0.3) and gap["ci95"] == pytest.approx(0.05)
    assert (gap["high"], gap["low"]) == ("f", "m")
    cell = g.cell_groups(None, {"face_reid": {"metric": "top1", "table": table}}, "acc")
    assert cell["worst_privacy"] == {"privacy": 0.2, "group": "gender=f", "attack": "face_reid"}
    flat = g.flat_metrics(cell)
    assert flat["group.face_reid.gender.f.top1"] == 0.7 and flat["group.worst_privacy"] == 0.2
    assert "group.face_reid.gender.x.n" in flat and "group.face_reid.gender.gap" in flat
    text = format_groups(cell)
    assert "gender     f" in text and "largest face_reid gap in gender: top1 0.3000 ± 0.0500 (f − m)" in text


def test_few_shot_episodes_are_drawn_within_each_group():
    # Group A's 6 identities are perfectly separable; group B's 6 all embed to one point.
    labels = torch.arange(12).repeat_interleave(10)
    gender = (labels >= 6).long()
    emb = torch.zeros(120, 12)
    emb[:60] = torch.nn.functional.one_hot(labels[:60], 12).float() * 10
    groups = g.demographic_groups({"gender": gender}, {"gender": ["a", "b"]})
    table = group_episode_accuracies({"acc": emb}, labels, groups, (5, 6, 1), 50,
                                     lambda attr, value: torch.Generator().manual_seed(1), min_size=20)
    a, b = table["gender"]["a"], table["gender"]["b"]
    assert a["acc"] == 1.0 and a["classes"] == 6 and a["episodes"] == 50
    assert b["acc"] < 0.5  # mixed episodes would give A's separable identities to B
    small = group_episode_accuracies({"acc": emb}, labels, groups, (7, 6, 1), 5,
                                     lambda attr, value: torch.Generator().manual_seed(1), min_size=20)
    assert small["gender"]["a"] == {"n": 60, "classes": 6, "flag": "group too small"}
    assert not math.isnan(a["acc_ci95"])
