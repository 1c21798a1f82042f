"""Honest privacy scores: an attack too weak to show anything never scores a mechanism as private."""

from __future__ import annotations

import math

import pytest
from scipy.stats import binomtest

from bench.cell.report import format_result
from bench.cell.result import attack_flags
from bench.core.interfaces import AttackOutcome, Result, privacy_score
from bench.core.scores import TOO_WEAK, binomial_sf, clean_advantage_pvalue, worst


def test_a_useless_attack_is_undefined_not_perfect_privacy():
    assert privacy_score(0.80, 0.74, 0.75) is None
    assert privacy_score(0.80, 0.74, 0.75, trials=1000) is None
    assert privacy_score(0.10, 0.10, 0.10) is None


def test_the_formula_where_the_clean_advantage_is_significant():
    assert privacy_score(0.5, 0.9, 0.1, trials=400) == pytest.approx(1 - 0.4 / 0.8)
    assert privacy_score(0.05, 0.9, 0.1, trials=400) == 1.0  # below chance on the release: nothing retained
    assert privacy_score(0.95, 0.9, 0.1, trials=400) == 0.0  # the release helps the attack: clipped
    assert privacy_score(float("nan"), 0.9, 0.1) is None


def test_significance_is_the_exact_one_sided_binomial_test():
    for k, n, p in [(30, 100, 0.2), (7, 420, 1 / 60), (0, 10, 0.5), (10, 10, 0.5), (61, 100, 0.5)]:
        assert binomial_sf(k, n, p) == pytest.approx(binomtest(k, n, p, alternative="greater").pvalue, rel=1e-9)
    # 13 of 60 correct against a chance rate of 1/10: p ~ 0.005, significant at 0.01
    assert clean_advantage_pvalue(13 / 60, 0.1, 60) < 0.01
    assert privacy_score(0.1, 13 / 60, 0.1, trials=60) is not None
    # 10 of 60: p ~ 0.16, not significant however large the clean accuracy looks relative to chance
    assert privacy_score(0.1, 10 / 60, 0.1, trials=60) is None


def test_the_worst_defined_score_wins_and_weak_parts_are_flagged():
    outcome = AttackOutcome(
        metrics={}, value=0.0, clean=0.0, chance=0.0,
        parts={
            "gender": AttackOutcome({}, value=0.70, clean=0.90, chance=0.5, trials=500),
            "age": AttackOutcome({}, value=0.30, clean=0.31, chance=0.30, trials=500),
        },
    )
    assert outcome.privacy() == pytest.approx(1 - 0.2 / 0.4)
    assert outcome.flags() == {"age": TOO_WEAK}
    weak = AttackOutcome({}, value=0.2, clean=0.2, chance=0.25, trials=100)
    flags = attack_flags({"attribute_inference": outcome, "face_reid": weak})
    assert flags == {"attribute_inference.age": TOO_WEAK, "face_reid": TOO_WEAK}
    assert worst([None, 0.4, 0.7]) == 0.4 and worst([None]) is None


def test_a_too_weak_attack_is_flagged_in_the_printed_table():
    result = Result(
        cell_key="k", task="t", dataset="d", mechanism="m", mechanism_version=1, params={}, seed=0, profile="smoke",
        utility={"acc": 0.5}, primary_metric="acc", attacks={"face_reid": {"top1": 0.2}}, privacy={"face_reid": None},
        privacy_score=None, claim=None, runtime_s=1.0, versions={}, git_sha="x", dataset_fingerprint="f",
        synthetic=True, device="cpu", created="now", privacy_flags={"face_reid": TOO_WEAK},
    )
    text = format_result(result)
    assert "privacy.face_reid" in text and "undefined (attack too weak)" in text
    assert "privacy_score" in text and "every attack too weak" in text
    assert not math.isnan(result.runtime_s)
