"""The audit's parts: neighbouring inputs per unit, the fitted test, the run and its report."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bench.audit import (
    AuditConfig,
    Auditor,
    audit_mechanism,
    auditor_for,
    known_units,
    register_auditor,
    run_audit,
    scoped_auditors,
)
from bench.audit.images import AnyImageAuditor, MPixelAuditor
from bench.audit.latent import ClippedLatentAuditor
from bench.core.interfaces import Mechanism, PrivacyClaim, check_batch
from bench.core.registry import register_mechanism, scoped
from bench.errors import BenchError
from bench.privacy.audit_maths import max_demonstrable_epsilon
from bench.privacy.distinguish import best_threshold, choose_rule, fit_statistics


class _ClaimedIdentity(Mechanism):
    """Releases images unchanged yet claims 1-DP: any audit must refute it."""

    unit = "m-pixel (m=1)"

    def apply(self, images, *, generator, boxes=None):
        check_batch(self.name, images, generator)
        return images.clone()

    def claim(self):
        return PrivacyClaim(1.0, unit=self.unit)


class _Constant(_ClaimedIdentity):
    """Releases a constant: perfectly private."""

    def apply(self, images, *, generator, boxes=None):
        check_batch(self.name, images, generator)
        return torch.full_like(images, 77)


class _OddUnit(_ClaimedIdentity):
    """Claims a unit no auditor knows; it must never be run."""

    unit = "pixel rows (r=2)"

    def apply(self, images, *, generator, boxes=None):
        raise AssertionError("an audit ran the mechanism before validating the claim")


class _BoxUser(_ClaimedIdentity):
    """Needs boxes; checks the audit gives one per image."""

    uses_boxes = True

    def apply(self, images, *, generator, boxes=None):
        assert boxes is not None and len(boxes) == len(images)
        return super().apply(images, generator=generator)


def _instance(cls, name):
    register_mechanism(name)(cls)
    return cls()


def _config(**kw):
    return AuditConfig(**{"trials": 200, **kw})


def test_units_dispatch_on_the_claims_unit():
    assert auditor_for("m-pixel (m=3)") is MPixelAuditor
    assert auditor_for("any image of this size") is AnyImageAuditor
    assert auditor_for("latent (clipped)") is ClippedLatentAuditor
    assert {"m-pixel", "any image of this size", "latent (clipped)"} <= set(known_units())


def test_unknown_unit_names_it_and_the_known_ones():
    with pytest.raises(BenchError, match=r"'pixel rows \(r=2\)'.*'any image of this size'.*'m-pixel'"):
        auditor_for("pixel rows (r=2)")


def test_register_auditor_longest_prefix_wins_and_duplicates_raise():
    with scoped_auditors():
        @register_auditor("m-pixel (m=1) strict")
        class Strict(MPixelAuditor):
            pass

        assert auditor_for("m-pixel (m=1) strict") is Strict
        assert auditor_for("m-pixel (m=1)") is MPixelAuditor
        with pytest.raises(ValueError, match="already has an auditor"):
            register_auditor("m-pixel")(Strict)
    assert auditor_for("m-pixel (m=1) strict") is MPixelAuditor


def test_m_pixel_inputs_differ_in_exactly_m_pixels_in_every_channel():
    with scoped():
        mech = _instance(_ClaimedIdentity, "audit_identity")
        for m, side in ((1, 1), (4, 2), (5, 3)):
            auditor = MPixelAuditor(mech, PrivacyClaim(1.0, unit=f"m-pixel (m={m})"), _config())
            first, second = auditor.pair
            changed = (first != second).all(0)
            assert int(changed.sum()) == m and not bool((first != second).any(0)[~changed].any())
            assert bool(changed[:side, :side].sum() == m)
            assert first[:, changed].unique().tolist() == [0]
            assert second[:, changed].unique().tolist() == [255]
            assert bool((first[:, ~changed] == 128).all())


def test_m_pixel_unit_must_name_m():
    with scoped():
        mech = _instance(_ClaimedIdentity, "audit_identity")
        with pytest.raises(BenchError, match="m-pixel"):
            MPixelAuditor(mech, PrivacyClaim(1.0, unit="m-pixel (m=some)"), _config())


def test_any_image_inputs_are_the_extremes():
    with scoped():
        mech = _instance(_ClaimedIdentity, "audit_identity")
        first, second = AnyImageAuditor(mech, PrivacyClaim(1.0, unit="any image of this size"), _config()).pair
        assert bool((first == 0).all()) and bool((second == 255).all()) and first.shape == (3, 16, 16)


def test_latent_unit_needs_privatise():
    with scoped():
        mech = _instance(_ClaimedIdentity, "audit_identity")
        with pytest.raises(BenchError, match="privatise"):
            ClippedLatentAuditor(mech, PrivacyClaim(1.0, unit="latent (clipped)"), _config())


def test_best_threshold_finds_a_perfect_split_in_either_direction():
    low, high = np.zeros(100), np.ones(100)
    threshold, upward, bound = best_threshold(low, high, 0.0, 0.95)
    assert (threshold, upward) == (1.0, True) and bound == pytest.approx(max_demonstrable_epsilon(100))
    threshold, upward, bound = best_threshold(high, low, 0.0, 0.95)
    assert (threshold, upward) == (0.0, False) and bound == pytest.approx(max_demonstrable_epsilon(100))
    assert best_threshold(low, low, 0.0, 0.95)[2] == 0.0


def test_statistics_read_repeated_columns_once_and_drop_uninformative_ones():
    torch.manual_seed(0)
    noise = torch.distributions.Laplace(0.0, 1.0)
    a, b = noise.sample((500, 1)), noise.sample((500, 1)) + 3.0
    fixed = torch.full((500, 1), 5.0)
    llr, linear = fit_statistics(torch.cat([a, a, fixed], 1), torch.cat([b, b, fixed], 1))
    assert llr.columns.tolist() == [0]
    scale = torch.cat([(a - a.median()).abs(), (b - b.median()).abs()]).mean().double()
    assert float(llr.weight[0]) == pytest.approx(2 / float(scale))
    rule = choose_rule([llr, linear], torch.cat([a, a, fixed], 1), torch.cat([b, b, fixed], 1), 0.0, 0.95)
    assert rule.upward and rule.selection_bound > 1.0


def test_laplace_statistic_is_the_clamped_log_likelihood_ratio():
    first = torch.tensor([[0.0], [0.0], [0.0]])
    second = torch.tensor([[4.0], [4.0], [4.0]])
    llr = fit_statistics(first, second)[0]
    y = torch.tensor([[-10.0], [1.0], [3.0], [50.0]])
    # scale floor: no spread; weight = 1 / 1e-9; value = clamp(2y - 4, -4, 4) / 1e-9
    expected = torch.tensor([-4.0, -2.0, 2.0, 4.0]) / 1e-9
    assert torch.allclose(llr(y), expected.double())


def test_a_claim_without_noise_is_refuted_at_the_largest_demonstrable_epsilon():
    with scoped():
        report = audit_mechanism(_instance(_ClaimedIdentity, "audit_identity"), _config())
    assert (report.false_positives, report.false_negatives) == (0, 0)
    assert report.epsilon_lower_bound == pytest.approx(max_demonstrable_epsilon(200))
    assert not report.passed and "FAIL" in report.summary()


def test_a_constant_release_shows_nothing():
    with scoped():
        report = audit_mechanism(_instance(_Constant, "audit_constant"), _config())
    # 200 trials cannot refute a 1.25x over-claim of epsilon=1: not refuted, but not a pass either
    assert report.epsilon_lower_bound == 0.0 and report.verdict == "inconclusive" and not report.passed


def test_boxes_are_given_to_mechanisms_that_use_them():
    with scoped():
        report = audit_mechanism(_instance(_BoxUser, "audit_boxes"), _config())
    assert not report.passed


def test_unauditable_claims_fail_before_any_release():
    with scoped():
        with pytest.raises(BenchError, match="no auditor for claim unit"):
            audit_mechanism(_instance(_OddUnit, "audit_odd"), _config())

        class Infinite(_OddUnit):
            unit = "m-pixel (m=1)"

            def claim(self):
                return PrivacyClaim(float("inf"), unit=self.unit)

        with pytest.raises(BenchError, match="finite epsilon"):
            audit_mechanism(_instance(Infinite, "audit_inf"), _config())


@pytest.mark.parametrize("field,value", [("trials", 99), ("trials", 1000.0), ("confidence", 1.0),
                                         ("seed", -1), ("image_size", 2), ("device", "auto")])
def test_bad_settings_raise_bench_error(field, value):
    with pytest.raises(BenchError, match=field.replace("_", " ")):
        AuditConfig(**{field: value}).validate()


def test_run_audit_is_deterministic_and_sound_for_dp_pix():
    first = run_audit("dp_pix", {"epsilon": "1", "block": "4"}, 500, seed=3)
    again = run_audit("dp_pix", {"epsilon": 1.0, "block": 4}, 500, seed=3)
    other = run_audit("dp_pix", {"epsilon": 1.0, "block": 4}, 500, seed=4)
    assert first.to_dict() | {"runtime_s": 0} == again.to_dict() | {"runtime_s": 0}
    assert (first.false_positives, first.false_negatives) != (other.false_positives, other.false_negatives)
    assert first.verdict == "inconclusive" and 0.0 < first.epsilon_lower_bound <= 1.0  # 500 < trials_needed


def test_no_claim_means_nothing_to_audit():
    report = run_audit("gaussian_noise", {}, 100)
    assert report.claim is None and report.passed and report.epsilon_lower_bound is None
    assert report.format() == "gaussian_noise makes no formal claim: nothing to audit"


def test_report_serialises_and_warns_when_the_claim_is_out_of_reach():
    report = run_audit("dp_latent", {"epsilon": 50.0, "latent_dim": 2, "steps": 5}, 100)
    data = json.loads(json.dumps(report.to_dict()))
    assert data["claim"]["unit"] == "latent (clipped)" and data["verdict"] == "inconclusive"
    assert data["passed"] is False
    assert "cannot detect a violation" in report.format()
    assert report.epsilon_lower_bound <= report.max_demonstrable_epsilon < 50.0


class _RowAuditor(Auditor):
    """A plugin auditor: a black and a white 1x1 grey image."""

    def describe(self):
        return "a black vs a white 1x1 image"

    def values_per_trial(self):
        return 1

    def observe(self, which, streams):
        images = torch.full((len(streams), 1, 1, 1), 255 * which, dtype=torch.uint8)
        return self.mechanism.apply(images, generator=streams).flatten(1).float()


def test_a_plugin_unit_is_audited_through_its_registered_auditor():
    class Rows(_ClaimedIdentity):
        unit = "pixel rows (r=2)"

    with scoped(), scoped_auditors():
        register_auditor("pixel rows")(_RowAuditor)
        report = audit_mechanism(_instance(Rows, "audit_rows"), _config())
    assert report.neighbours == "a black vs a white 1x1 image" and not report.passed
    with pytest.raises(BenchError):
        auditor_for("pixel rows (r=2)")


class _Recorder(_Constant):
    """Remembers the seed of every stream it was given."""

    seen: list[int] = []

    def apply(self, images, *, generator, boxes=None):
        _Recorder.seen += generator.seeds.tolist()
        return super().apply(images, generator=generator)


def test_every_trial_has_its_own_stream_and_selection_is_capped(monkeypatch):
    import bench.audit.run as run_module

    monkeypatch.setattr(run_module, "MAX_SELECTION_TRIALS", 150)
    _Recorder.seen = []
    with scoped():
        report = audit_mechanism(_instance(_Recorder, "audit_recorder"), _config(trials=400, chunk_values=768 * 64))
    assert report.selection_trials == 150 and report.trials == 400
    scanned = report.candidates * report.scan_trials
    assert scanned > 0 and len(_Recorder.seen) == 2 * (150 + 400 + scanned) == len(set(_Recorder.seen))
