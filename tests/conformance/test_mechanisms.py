"""Every registered mechanism passes the conformance suite; broken ones do not."""

from __future__ import annotations

import pytest
import torch

from bench.core.interfaces import Mechanism, Param, ParamSpace, PrivacyClaim, Streams, check_batch
from bench.core.registry import mechanisms, register_mechanism, scoped
from bench.errors import BenchError
from bench.testing import CHECKS, run_conformance
from bench.testing.mechanisms import invalid_values
from mechanisms.dp_latent import DPLatent
from mechanisms.dp_pix import DPPix
from mechanisms.image_dp import ImageDP


@pytest.mark.parametrize("check", sorted(CHECKS))
@pytest.mark.parametrize("name", mechanisms.list())
def test_registered_mechanism_conforms(name, check):
    CHECKS[check](name)


class _GlobalRng(Mechanism):
    """Adds noise from the global RNG instead of its streams."""

    def apply(self, images, *, generator, boxes=None):
        check_batch(self.name, images, generator)
        noise = (torch.rand(images.shape, device=images.device) * 40).to(torch.uint8)
        return images.clamp(max=215) + noise


class _NoChannelFactor(DPPix):
    """DP-Pix as in the grey-scale original: the noise forgets the channel factor C."""

    def noise_scale(self, channels: int) -> float:
        return super().noise_scale(1)


class _LatentWithoutDimension(DPLatent):
    """DP latent noise that forgets the split of the budget over the d components (d times too little)."""

    def privatise(self, latents, generator):
        lower, upper = self.lower.to(latents.device), self.upper.to(latents.device)
        scale = (upper - lower) / self.config["epsilon"]
        noise = generator.laplace((latents.shape[1],), latents.dtype).to(latents.device)
        noisy = torch.maximum(torch.minimum(latents, upper), lower).addcmul_(noise, scale)
        return torch.maximum(torch.minimum(noisy, upper), lower)


class _ImageDPNominalClaim(ImageDP):
    """epsilon-image DP claiming the nominal epsilon where Eq. 3 under-counts an RGB cell (c=128)."""

    def claim(self):
        return PrivacyClaim(self.config["epsilon"], 0.0, unit="any image of this size")


class _InPlace(Mechanism):
    """Pixelates by writing into its input."""

    def apply(self, images, *, generator, boxes=None):
        check_batch(self.name, images, generator)
        images[:, :, 1:, :] = images[:, :, :1, :]
        return images


class _ReusedBuffer(Mechanism):
    """Inverts images into one output buffer that it keeps between calls."""

    def apply(self, images, *, generator, boxes=None):
        check_batch(self.name, images, generator)
        if getattr(self, "_out", None) is None or self._out.shape != images.shape:
            self._out = torch.empty_like(images)
        return torch.sub(255, images, out=self._out)


class _HalfWritten(Mechanism):
    """Inverts images into a fresh buffer but forgets its last row."""

    def apply(self, images, *, generator, boxes=None):
        check_batch(self.name, images, generator)
        out = torch.empty_like(images)
        torch.sub(255, images[..., :-1, :], out=out[..., :-1, :])
        return out


class _FloatOut(Mechanism):
    """Returns float images and accepts anything."""

    params = ParamSpace(strength=Param(float, 1.0, low=0.0))

    def apply(self, images, *, generator, boxes=None):
        return images.float() * self.config["strength"]


class _ClaimWithoutProbe(Mechanism):
    """Claims a guarantee nobody can check."""

    def apply(self, images, *, generator, boxes=None):
        check_batch(self.name, images, generator)
        return images.clone()

    def claim(self):
        return PrivacyClaim(1.0, unit="m-pixel (m=1)")


def failed_checks(cls, name):
    with scoped():
        register_mechanism(name)(cls)
        return {line.split(":")[0] for line in run_conformance(name)}


def test_global_rng_fails_determinism_and_batch_independence():
    failed = failed_checks(_GlobalRng, "broken_global_rng")
    assert {"determinism", "batch_independence"} <= failed


def test_dp_pix_without_channel_factor_fails_claimed_noise():
    with scoped():
        register_mechanism("broken_dp_pix")(_NoChannelFactor)
        failures = run_conformance("broken_dp_pix", checks=["claimed_noise"])
    assert len(failures) == 1 and "does not follow the claimed distribution" in failures[0]


@pytest.mark.parametrize("cls", [_NoChannelFactor, _LatentWithoutDimension, _ImageDPNominalClaim])
def test_claims_that_do_not_hold_fail_the_audit(cls):
    with scoped():
        register_mechanism("broken_claim")(cls)
        failures = run_conformance("broken_claim", checks=["audit"])
    assert len(failures) == 1 and "exceeds claimed epsilon" in failures[0], failures


def test_in_place_mechanism_fails_input_untouched():
    assert "input_untouched" in failed_checks(_InPlace, "broken_in_place")


def test_mechanism_reusing_its_output_fails_input_untouched():
    with scoped():
        register_mechanism("broken_reused_buffer")(_ReusedBuffer)
        failures = run_conformance("broken_reused_buffer", checks=["input_untouched"])
    assert len(failures) == 1 and "wrote into an earlier call's output" in failures[0], failures


def test_mechanism_leaving_part_of_its_output_unwritten_fails_initialised_output():
    with scoped():
        register_mechanism("broken_half_written")(_HalfWritten)
        failures = run_conformance("broken_half_written", checks=["initialised_output"])
    assert len(failures) == 1 and "depends on memory it never wrote" in failures[0], failures


def test_float_output_fails_uint8():
    assert "uint8" in failed_checks(_FloatOut, "broken_float")


def test_claim_without_probe_fails():
    assert "claimed_noise" in failed_checks(_ClaimWithoutProbe, "broken_unprobed_claim")


def test_broken_mechanisms_do_not_leak_out_of_scope():
    failed_checks(_GlobalRng, "broken_scoped")
    with pytest.raises(BenchError):
        mechanisms.get("broken_scoped")


def test_correct_subclass_inherits_probe_and_passes():
    class Renamed(DPPix):
        pass

    with scoped():
        register_mechanism("dp_pix_renamed")(Renamed)
        assert run_conformance("dp_pix_renamed", checks=["claimed_noise", "audit"]) == []


def test_invalid_values_cover_range_type_and_none():
    values = invalid_values(Param(int, 4, low=1, high=10))
    assert {0, 11, 1.5, None, "not-a-number"} <= set(v for v in values if v == v)
    assert 0.0 in invalid_values(Param(float, 1.0, low=0.0, low_open=True))
    assert None not in invalid_values(Param(float, None, low=0.0, low_open=True, nullable=True))
    assert invalid_values(Param(str, "a", choices=("a", "b"))) == ["__not_a_choice__", None]


def test_streams_are_per_image():
    gen = Streams.for_images(0, "x", 3)
    assert torch.equal(gen[1].uniform((4,)), gen.uniform((4,))[1:2])
