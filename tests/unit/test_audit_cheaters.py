"""Cheating mechanisms the audit must catch, the whole-release pairs behind it, and the gate's trial plan."""

from __future__ import annotations

import math
import re

import pytest
import torch

from bench.audit import AuditConfig, audit_mechanism, run_audit
from bench.audit.conformance import CONFORMANCE_CONFIDENCE, CONFORMANCE_MAX_TRIALS, conformance_audit
from bench.audit.images import MAX_PLACES, RANDOM_BACKGROUNDS, AnyImageAuditor, MPixelAuditor
from bench.audit.run import gate_trials
from bench.core.interfaces import PrivacyClaim
from bench.core.registry import register_mechanism, scoped
from bench.privacy.audit_maths import max_demonstrable_epsilon, trials_to_demonstrate
from bench.privacy.audit_plan import POWER_RATIO, _expected_bound, planned_trials, trials_needed, verdict
from bench.testing import run_conformance
from mechanisms.dp_latent import DPLatent
from mechanisms.dp_pix import DPPix
from mechanisms.image_dp import ImageDP
from mechanisms.pixelate import Pixelate


class LeakedPixel(DPPix):
    """DP-Pix that also copies input pixel (2, 3) into the bottom-right output pixel: epsilon is infinite."""

    def apply(self, images, *, generator, boxes=None):
        out = super().apply(images, generator=generator, boxes=boxes)
        out[:, :, -1, -1] = images[:, :, 2, 3]
        return out


class UnnoisedRow(DPPix):
    """DP-Pix that releases its last row of cells as plain cell means, without noise."""

    def apply(self, images, *, generator, boxes=None):
        out = super().apply(images, generator=generator, boxes=boxes)
        block, height = self.config["block"], images.shape[-2]
        top = ((height - 1) // block) * block
        plain = Pixelate(block=block).apply(images, generator=generator)
        out[:, :, top:, :] = plain[:, :, top:, :]
        return out


class NoChannelFactor(DPPix):
    """DP-Pix without the channel factor C: 3 times too little noise on colour images."""

    def noise_scale(self, channels: int) -> float:
        return super().noise_scale(1)


class WeakNoise(DPPix):
    """DP-Pix with 0.8 x its noise: truly 1.25 epsilon-DP."""

    def noise_scale(self, channels: int) -> float:
        return 0.8 * super().noise_scale(channels)


class LatentLeak(DPLatent):
    """DP latent whose released image carries the input's top-left pixel past the noisy latent."""

    def apply(self, images, *, generator, boxes=None):
        out = super().apply(images, generator=generator, boxes=boxes)
        out[:, :, 0, 0] = images[:, :, 0, 0]
        return out


SEED = 20240601


@pytest.mark.parametrize("cls", [LeakedPixel, UnnoisedRow, NoChannelFactor, WeakNoise])
def test_the_conformance_suite_fails_each_cheating_dp_pix_at_the_trials_its_claim_needs(cls):
    needed = gate_trials(cls(epsilon=1.0, block=4), CONFORMANCE_CONFIDENCE, CONFORMANCE_MAX_TRIALS)
    assert needed == trials_needed(1.0, 0.0, CONFORMANCE_CONFIDENCE) == 17155
    with scoped():
        register_mechanism("cheating_dp_pix")(cls)
        failures = run_conformance("cheating_dp_pix", checks=["audit"])
    assert len(failures) == 1 and "FAIL" in failures[0] and "exceeds claimed epsilon 1" in failures[0], failures
    assert f"({needed} trials per input, 0.99 confidence)" in failures[0]


@pytest.mark.parametrize("cls", [DPPix, ImageDP, DPLatent])
def test_the_genuine_mechanisms_pass_at_the_trials_their_claims_need(cls):
    report = conformance_audit(cls, None, torch.device("cpu"), SEED)
    assert report.verdict == "passed" and report.passed, report.format()
    assert report.trials == trials_needed(report.claim.epsilon, 0.0, CONFORMANCE_CONFIDENCE)
    assert 0.0 < report.epsilon_lower_bound <= report.claim.epsilon


@pytest.mark.parametrize("cls,rows", [(LeakedPixel, {2}), (UnnoisedRow, {4, 5, 6, 7})])
def test_the_scan_finds_where_a_leak_is(cls, rows):
    config = AuditConfig(trials=200, confidence=0.99, image_size=8)
    report = audit_mechanism(cls(epsilon=1.0, block=4), config)
    assert report.verdict == "failed" and report.pair_index != 0 and report.pair_separation > 1e6
    where = re.search(r"^8x8x3 mid-grey images, 1 pixel from pixel \(row (\d+), column (\d+)\)", report.neighbours)
    assert where and int(where.group(1)) in rows and (cls is not LeakedPixel or where.group(2) == "3")
    assert report.false_positives == report.false_negatives == 0
    assert report.epsilon_lower_bound == pytest.approx(max_demonstrable_epsilon(200, confidence=0.99))


def test_a_latent_mechanism_leaking_through_apply_is_caught_on_the_released_image():
    mechanism = LatentLeak(epsilon=2.0, latent_dim=2, steps=5)
    report = audit_mechanism(mechanism, AuditConfig(trials=200, confidence=0.99, image_size=8))
    assert report.verdict == "failed" and "through apply" in report.neighbours, report.format()
    genuine = audit_mechanism(DPLatent(epsilon=2.0, latent_dim=2, steps=5),
                              AuditConfig(trials=200, confidence=0.99, image_size=8))
    assert genuine.verdict != "failed" and genuine.pair_index == 0


@pytest.mark.parametrize("m", [1, 3])
def test_m_pixel_candidates_change_every_pixel_of_both_sizes_in_exactly_m_pixels(m):
    claim = PrivacyClaim(1.0, unit=f"m-pixel (m={m})")
    auditor = MPixelAuditor(DPPix(), claim, AuditConfig(trials=100, image_size=8))
    assert auditor.sizes == [(8, 8), (11, 9)]
    covered = {size: torch.zeros(size, dtype=torch.bool) for size in auditor.sizes}
    images = [auditor.pair_images(i) for i in range(auditor.candidate_count())]
    for first, second in images:
        changed = (first != second).any(0)
        assert int(changed.sum()) == m and bool((first[:, changed] == 0).all())
        assert bool((second[:, changed] == 255).all()) and torch.equal(first[:, ~changed], second[:, ~changed])
        covered[tuple(changed.shape)] |= changed
    assert all(bool(c.all()) for c in covered.values())
    assert any(bool((first != 128).sum() > 3 * m) for first, _ in images)  # random backgrounds too


def test_any_image_candidates_have_both_sizes_and_three_contents():
    auditor = AnyImageAuditor(ImageDP(epsilon=1.0), PrivacyClaim(1.0, unit="any image of this size"),
                              AuditConfig(trials=100, image_size=8))
    assert [p.shape for p in auditor.pairs] == [(3, 8, 8)] * 3 + [(3, 11, 9)] * 3
    first, second = auditor.pair_images(1)
    assert torch.equal(second, 255 - first) and tuple(first.shape) == (3, 8, 8)


def test_audits_are_reproducible_and_pairs_depend_on_the_seed():
    first = audit_mechanism(WeakNoise(epsilon=1.0, block=4), AuditConfig(trials=300, image_size=8, seed=5))
    again = audit_mechanism(WeakNoise(epsilon=1.0, block=4), AuditConfig(trials=300, image_size=8, seed=5))
    assert first.to_dict() | {"runtime_s": 0} == again.to_dict() | {"runtime_s": 0}
    claim = PrivacyClaim(1.0, unit="m-pixel (m=1)")
    one, two = (MPixelAuditor(DPPix(), claim, AuditConfig(trials=100, image_size=8, seed=s)) for s in (1, 2))
    assert not torch.equal(one.pair_images(one.candidate_count() - 1)[0], two.pair_images(two.candidate_count() - 1)[0])


def test_large_images_scan_a_seeded_sample_of_places():
    claim = PrivacyClaim(1.0, unit="m-pixel (m=1)")
    auditor = MPixelAuditor(DPPix(), claim, AuditConfig(trials=100, image_size=40))
    assert auditor.candidate_count() == 1 + 2 * (MAX_PLACES + RANDOM_BACKGROUNDS)


def test_trials_needed_is_the_first_count_where_a_125_percent_over_claim_is_refuted():
    for epsilon in (0.5, 1.0, 2.0, 6.0):
        n = int(trials_needed(epsilon, 0.0, 0.99))
        assert _expected_bound(n, epsilon, 0.0, 0.99) > epsilon >= _expected_bound(n - 1, epsilon, 0.0, 0.99)
        assert n >= trials_to_demonstrate(epsilon, 0.0, 0.99) and max_demonstrable_epsilon(n, 0.0, 0.99) > epsilon
    assert POWER_RATIO == 1.25 and math.isinf(trials_needed(50.0, 0.0, 0.99))
    assert planned_trials(8.0, 0.0, 0.99, cap=200_000) == 200_000 < trials_needed(8.0, 0.0, 0.99)
    assert planned_trials(50.0, 0.0, 0.99, cap=5000) == 5000


def test_verdicts():
    assert verdict(None, None, 0, None) == "passed"
    assert verdict(1.2, 1.0, 100, 50) == "failed"
    assert verdict(0.9, 1.0, 100, 50) == "passed"
    assert verdict(0.9, 1.0, 49, 50) == verdict(0.9, 1.0, 10**6, math.inf) == "inconclusive"


class OverClaim(DPPix):
    """Claims epsilon but adds the noise of 3 epsilon: truly 3 x its claim (e.g. claims 8, is 24)."""

    def noise_scale(self, channels: int) -> float:
        return super().noise_scale(channels) / 3


def test_a_claim_the_budget_cannot_reach_is_recorded_inconclusive_never_passed(monkeypatch, capsys):
    from pathlib import Path

    import bench.cli.entry_files as entry_files
    from bench.scale.grid import Placement, expand, suite_from_lists

    monkeypatch.setattr(entry_files, "SUBMIT_AUDIT_MAX_TRIALS", 2000)
    with scoped():
        register_mechanism("over_claim")(OverClaim)
        cells = expand(suite_from_lists(["fewshot_synth_faces"], ["over_claim"], {"epsilon": ["8"]}, [0], "smoke"),
                       Placement(results_dir=Path("unused")))
        reports = entry_files.submission_audit("over_claim", cells)
    (report,) = reports.values()
    assert report["trials"] == 2000 and report["verdict"] == "inconclusive" and report["passed"] is False
    assert report["trials_needed"] == trials_needed(8.0, 0.0, 0.99) > 2000
    assert "inconclusive" in capsys.readouterr().err


def test_run_audit_plans_its_trials_from_the_claim():
    report = run_audit("dp_pix", {"epsilon": 2.0, "block": 4}, None, confidence=0.99, image_size=8, max_trials=500)
    assert report.trials == 500 and report.verdict == "inconclusive" and "a pass takes" in report.format()
