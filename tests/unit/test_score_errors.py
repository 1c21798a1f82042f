"""Adversary statistics that say how much they know: standard errors, intervals and the imprecise flag."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from bench.cell.report import format_result
from bench.core.interfaces import AttackOutcome, Result
from bench.core.outcomes import attack_errors, imprecise_flags, privacy_score_se
from bench.core.scores import IMPRECISE, TOO_WEAK, Z95, proportion_se, score_interval, score_se


def test_the_binomial_error_is_wald_for_many_trials_and_never_zero():
    assert proportion_se(0.3, 10_000) == pytest.approx(math.sqrt(0.3 * 0.7 / 10_000), rel=1e-3)
    assert proportion_se(1.0, 40) > 0.02 and proportion_se(0.0, 40) > 0.02  # 40 / 40 is not exact
    assert proportion_se(0.5, 40) > proportion_se(0.5, 400)
    assert proportion_se(0.5, None) is None and proportion_se(0.5, 0) is None


def test_the_score_interval_is_the_delta_method_through_retained():
    value, clean, chance, se_v, se_c = 0.4, 0.8, 0.1, 0.03, 0.02
    low, high = score_interval(value, clean, chance, se_v, se_c)
    span = clean - chance
    se = math.sqrt(se_v ** 2 / span ** 2 + (value - chance) ** 2 * se_c ** 2 / span ** 4)
    score = 1 - (value - chance) / span
    assert (low, high) == pytest.approx((score - Z95 * se, score + Z95 * se))
    assert score_se(value, clean, chance, se_v, se_c) == pytest.approx(se)


def test_the_delta_method_matches_simulated_binomial_scores():
    rng = np.random.default_rng(0)
    n, value, clean, chance = 400, 0.35, 0.7, 0.05
    v = rng.binomial(n, value, 20_000) / n
    c = rng.binomial(n, clean, 20_000) / n
    simulated = np.std(1 - (v - chance) / (c - chance))
    assert score_se(value, clean, chance, proportion_se(value, n), proportion_se(clean, n)) == pytest.approx(
        simulated, rel=0.05)


def test_a_clipped_score_has_its_interval_cut_to_0_1():
    # below chance on the release: the score is clipped to 1, its interval cut at 1
    low, high = score_interval(0.08, 0.8, 0.1, 0.03, 0.02)
    assert high == 1.0 and 0.0 < low < 1.0
    # its standard error is the delta method's, not the cut interval's width / 3.92 (issue 55)
    clipped = AttackOutcome({"top1": 0.08}, value=0.08, clean=0.8, chance=0.1, trials=None, value_se=0.03,
                            clean_se=0.02)
    assert clipped.privacy() == 1.0
    assert clipped.privacy_se() == pytest.approx(score_se(0.08, 0.8, 0.1, 0.03, 0.02))
    assert clipped.privacy_se() > (high - low) / (2 * Z95)
    assert score_interval(0.95, 0.9, 0.1, 0.0, 0.0) == (0.0, 0.0)  # the release helps: clipped to 0
    assert score_interval(0.5, 0.9, 0.1, None, 0.01) is None and score_interval(0.5, 0.1, 0.1, 0.01, 0.01) is None


def test_outcomes_derive_binomial_errors_from_their_probes_unless_they_set_their_own():
    reid = AttackOutcome({"top1": 0.3}, value=0.3, clean=0.8, chance=0.125, trials=40)
    assert reid.standard_errors() == (proportion_se(0.3, 40), proportion_se(0.8, 40))
    # an AUC with its own p-value is no fraction of trials: its errors come from the attack (agentA's membership)
    auc = AttackOutcome({"auc": 0.7}, value=0.7, clean=0.9, chance=0.5, trials=200, pvalue=1e-6)
    assert auc.standard_errors() == (None, None) and auc.privacy_se() is None
    own = AttackOutcome({"auc": 0.7}, value=0.7, clean=0.9, chance=0.5, trials=200, pvalue=1e-6,
                        value_se=0.02, clean_se=0.01)
    assert own.standard_errors() == (0.02, 0.01)
    assert own.privacy_se() == pytest.approx(score_se(0.7, 0.9, 0.5, 0.02, 0.01))
    weak = AttackOutcome({"top1": 0.1}, value=0.1, clean=0.1, chance=0.1, trials=40)
    assert weak.privacy() is None and weak.interval() is None and weak.privacy_se() is None


def test_the_recorded_errors_are_those_of_the_decisive_attack_and_part():
    gender = AttackOutcome({}, value=0.70, clean=0.90, chance=0.5, trials=500)
    age = AttackOutcome({}, value=0.50, clean=0.60, chance=0.3, trials=500)  # 1 - 0.2 / 0.3: the worst part
    weak = AttackOutcome({}, value=0.30, clean=0.31, chance=0.30, trials=500)
    attribute = AttackOutcome({"acc": 0.7}, value=0.7, clean=0.9, chance=0.5, trials=500,
                              parts={"gender": gender, "age": age, "race": weak})
    assert attribute.decisive() is age and attribute.privacy_se() == age.privacy_se()
    reid = AttackOutcome({"top1": 0.3}, value=0.3, clean=0.8, chance=0.125, trials=40)
    outcomes = {"attribute_inference": attribute, "face_reid": reid}
    errors = attack_errors(outcomes, {"attribute_inference": "acc", "face_reid": "top1"})
    assert errors["face_reid"]["privacy_se"] == reid.privacy_se()
    assert errors["face_reid"]["top1_se"] == proportion_se(0.3, 40) and errors["face_reid"]["top1"] == 0.3
    assert errors["attribute_inference"]["privacy_se.gender"] == gender.privacy_se()
    assert "privacy_se.race" not in errors["attribute_inference"]  # undefined score: no error either
    worst = min(outcomes, key=lambda name: outcomes[name].privacy())
    assert privacy_score_se(outcomes) == outcomes[worst].privacy_se()
    assert privacy_score_se({"face_reid": AttackOutcome({}, value=0.1, clean=0.1, chance=0.1, trials=9)}) is None


def test_a_score_from_few_probes_is_flagged_imprecise_and_one_from_many_is_not():
    few = AttackOutcome({}, value=0.3, clean=0.8, chance=0.125, trials=40)  # a folder's 8 people x 5 probes
    many = AttackOutcome({}, value=0.3, clean=0.8, chance=0.125, trials=4000)
    flags = imprecise_flags({"face_reid": few, "face_reid_adapted": many})
    assert list(flags) == ["face_reid"] and flags["face_reid"].startswith(IMPRECISE)
    assert imprecise_flags({"face_reid": few}, width=1.0) == {}


def _result(**kw) -> Result:
    base = dict(cell_key="k", task="t", dataset="d", mechanism="m", mechanism_version=1, params={}, seed=0,
                profile="smoke", utility={"acc": 0.5}, primary_metric="acc", claim=None, runtime_s=1.0, versions={},
                git_sha="x", dataset_fingerprint="f", synthetic=True, device="cpu", created="now")
    return Result(**{**base, **kw})


def test_the_printed_table_shows_score_plus_minus_its_error_and_the_flag():
    few = AttackOutcome({"top1": 0.3}, value=0.3, clean=0.8, chance=0.125, trials=40)
    attacks = attack_errors({"face_reid": few}, {"face_reid": "top1"})
    flags = imprecise_flags({"face_reid": few})
    result = _result(attacks=attacks, privacy={"face_reid": few.privacy()}, privacy_score=few.privacy(),
                     privacy_score_se=few.privacy_se(), privacy_flags=flags)
    text = format_result(result)
    assert f"{few.privacy():.4f} ± {few.privacy_se():.4f}" in text
    assert "flag face_reid" in text and "flag privacy_score" in text and IMPRECISE in text
    assert "attack.face_reid.top1_se" in text and "attack.face_reid.privacy_se" not in text
    assert re.search(r"\n  set by +face_reid\n", text)  # the adversary that set privacy_score (issue 55)
    weak = _result(attacks={"face_reid": {"top1": 0.2}}, privacy={"face_reid": None}, privacy_score=None,
                   privacy_flags={"face_reid": TOO_WEAK})
    assert "undefined (attack too weak)" in format_result(weak) and "±" not in format_result(weak).split("privacy")[1]


def test_results_carry_the_error_and_read_those_written_before_it():
    result = _result(attacks={}, privacy={}, privacy_score=0.5, privacy_score_se=0.04)
    assert Result.from_dict(result.to_dict()).privacy_score_se == 0.04
    old = result.to_dict()
    del old["privacy_score_se"]
    assert Result.from_dict(old).privacy_score_se is None
