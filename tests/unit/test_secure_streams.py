"""Secure streams (OS CSPRNG) and the tail maths of the release claim."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from bench.core.interfaces import ImageSet, PrivacyClaim, RunContext
from bench.core.registry import mechanisms
from bench.errors import BenchError
from bench.randomness import rng
from bench.randomness.streams import Streams
from bench.release import secure_streams
from bench.release.secure_streams import (
    DrawTally,
    SecureStreams,
    clamped_laplace_delta,
    clip_absorbs_tail,
    coupling_delta,
    laplace_exposure,
    laplace_max_abs,
    laplace_tail_mass,
    normal_cap_mass,
    normal_max_abs,
    release_claim,
    tail_delta,
)
from mechanisms._ops import cell_means, fill_cells, to_uint8


def _patch_urandom(monkeypatch, byte: int) -> list[int]:
    """Makes os.urandom return one repeated byte; returns the sizes it was asked for."""
    calls: list[int] = []

    def fake(n: int) -> bytes:
        calls.append(n)
        return bytes([byte]) * n

    monkeypatch.setattr(secure_streams.os, "urandom", fake)
    return calls


# --- tail maths -------------------------------------------------------------------------


def test_tail_bounds_are_the_samplers_extremes():
    assert laplace_max_abs() == pytest.approx(36.7368005696771, rel=1e-12)
    assert laplace_tail_mass(laplace_max_abs()) == pytest.approx(2.0**-53, rel=1e-12)
    # Word 0 has the smallest uniform of both maps: the largest magnitude each can return.
    assert float(rng.laplace(torch.tensor([0]))[0]) == pytest.approx(laplace_max_abs(), rel=1e-15)
    assert float(rng.normal(torch.tensor([0]))[0]) == pytest.approx(normal_max_abs(), rel=1e-6)
    assert normal_max_abs() == pytest.approx(6.6604, abs=1e-4)
    assert normal_cap_mass() == 2.0**-32


def test_clamped_laplace_delta_worked_numbers():
    half_tail = 0.5 * 2.0**-53
    # dp_pix, epsilon 10, m=1, RGB: 3 values, each moved by at most 10/3 scales.
    assert clamped_laplace_delta(10.0, 3, 10 / 3) == pytest.approx(half_tail * (3 * math.exp(10 / 3) + 3), rel=1e-12)
    assert clamped_laplace_delta(10.0, 3, 10 / 3) == pytest.approx(4.8355e-15, rel=1e-4)
    assert clamped_laplace_delta(1.0, 3, 1 / 3) == pytest.approx(3.9894e-16, rel=1e-4)
    # Budget 1 over 5 values of at most 0.4: two at 0.4, one at 0.2, two at 0.
    expected = half_tail * (2 * math.exp(0.4) + math.exp(0.2) + 2 + 5)
    assert clamped_laplace_delta(1.0, 5, 0.4) == pytest.approx(expected, rel=1e-12)
    # A larger max shift than the budget is the budget.
    assert clamped_laplace_delta(1.0, 1, 5.0) == pytest.approx(half_tail * (math.e + 1), rel=1e-12)
    # Moves far beyond the clamp: the supports separate and delta is 1, not an overflow.
    assert clamped_laplace_delta(300.0, 3, 100.0) == 1.0
    assert clamped_laplace_delta(1e7, 6144, 1e7) == 1.0
    assert clamped_laplace_delta(1.0, 0, 0.5) == 0.0
    with pytest.raises(ValueError):
        clamped_laplace_delta(-1.0, 3, 1.0)


def test_coupling_delta_and_clip_absorption():
    assert coupling_delta(0.0, 1e-16) == pytest.approx(2e-16)
    assert coupling_delta(1.0, 10 * 2.0**-53) == pytest.approx((1 + math.e) * 10 * 2.0**-53)
    assert coupling_delta(1e6, 1e-16) == 1.0
    threshold = 255.5 / laplace_max_abs()
    assert clip_absorbs_tail(threshold * 1.0001, 255.0, 0.5)
    assert not clip_absorbs_tail(threshold * 0.9999, 255.0, 0.5)
    assert DrawTally(laplace=4, normal=2).coupling_mass() == pytest.approx(4 * 2.0**-53 + 2 * 2.0**-32)


def test_dp_pix_tail_delta_by_parameters():
    dp_pix = mechanisms.get("dp_pix")
    absorbed = dp_pix(epsilon=3, block=4)  # scale 15.9: 36.7 scales always clip
    delta, why = tail_delta(absorbed, absorbed.claim(), (64, 64), DrawTally())
    assert delta == 0.0 and "absorbs" in why
    exposed = dp_pix(epsilon=10, block=4)  # scale 4.78: the clamp can land inside [0, 255]
    assert laplace_exposure(exposed, (64, 64)).affected == 3
    delta, why = tail_delta(exposed, exposed.claim(), (64, 64), DrawTally())
    assert delta == pytest.approx(4.8355e-15, rel=1e-4) and "3 noisy values" in why
    m4 = dp_pix(epsilon=10, block=4, m=4)
    assert laplace_exposure(m4, (64, 64)).affected == 12
    assert laplace_exposure(m4, (2, 2)).affected == 3  # a 2x2 image has one cell
    gaussian = mechanisms.get("gaussian_noise")()
    assert tail_delta(gaussian, None, (64, 64), DrawTally(normal=5)) == (0.0, "no formal claim")


def test_unknown_mechanisms_get_the_coupling_bound():
    blur = mechanisms.get("blur")()
    claim = PrivacyClaim(1.0, 1e-9, "test unit")
    delta, why = tail_delta(blur, claim, (8, 8), DrawTally(laplace=10))
    assert delta == pytest.approx((1 + math.e) * 10 * 2.0**-53) and "coupling" in why
    stated = release_claim(claim, {"8x8": (delta, why), "4x4": (0.0, "")})
    assert stated.delta == pytest.approx(1e-9 + delta) and stated.epsilon == 1.0 and stated.unit == "test unit"
    assert "os.urandom" in stated.note and "Mironov" in stated.note
    assert release_claim(None, {"8x8": (0.0, "")}) is None


# --- the streams ------------------------------------------------------------------------


def test_shapes_dtypes_and_device():
    streams = SecureStreams(5)
    assert len(streams) == 5 and streams.device == torch.device("cpu")
    assert streams.uniform((2, 3)).shape == (5, 2, 3) and streams.uniform((2, 3)).dtype == torch.float32
    assert streams.uniform((4,), torch.float64).dtype == torch.float64
    assert streams.uniform((4,), torch.float16).dtype == torch.float16
    assert streams.normal((3, 2)).shape == (5, 3, 2) and streams.normal((3,)).dtype == torch.float32
    assert streams.laplace((7,)).dtype == torch.float32 and streams.laplace((7,), torch.float64).dtype == torch.float64
    ints = streams.integers(6, (100,))
    assert ints.dtype == torch.int64 and int(ints.min()) >= 0 and int(ints.max()) <= 5
    assert streams.laplace((0,)).shape == (5, 0) and SecureStreams(0).normal((3,)).shape == (0, 3)
    assert len(streams[1]) == 1 and len(streams[1:4]) == 3 and len(streams[[0, 2]]) == 2
    assert len(streams[torch.tensor([True, False, True, True, False])]) == 3 and len(streams[-1]) == 1
    assert isinstance(streams.derive("mask"), SecureStreams) and len(streams.derive("mask")) == 5
    assert streams.to("cpu").device == torch.device("cpu")
    with pytest.raises(ValueError):
        streams.integers(0, (3,))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_draws_land_on_the_cuda_device():
    streams = SecureStreams(3, "cuda")
    assert streams.laplace((10,)).device.type == "cuda" and streams.to("cpu").normal((2,)).device.type == "cpu"


def test_draws_are_not_reproducible():
    streams = SecureStreams(4)
    first, second = streams.laplace((256,)), streams.laplace((256,))
    assert not torch.equal(first, second)
    assert not torch.equal(streams.uniform((256,)), SecureStreams(4).uniform((256,)))
    assert not torch.equal(streams.derive("a").normal((256,)), streams.derive("a").normal((256,)))
    # Counter-based streams replay; these never match them.
    counter = Streams.for_images(0, "release/test", 4)
    assert torch.equal(counter.laplace((256,)), counter.laplace((256,)))
    assert not torch.equal(streams.laplace((256,)), counter.laplace((256,)))


def test_words_are_os_urandom_bytes_mapped_like_rng(monkeypatch):
    calls = _patch_urandom(monkeypatch, 0x00)
    streams = SecureStreams(3)
    largest = torch.full((3, 5), laplace_max_abs(), dtype=torch.float64)
    assert torch.allclose(streams.laplace((5,), torch.float64), largest)
    assert calls == [3 * 5 * 8]  # one call for the whole batch
    assert bool((streams.uniform((4,)) == 0).all())
    _patch_urandom(monkeypatch, 0xFF)
    assert bool((streams.laplace((5,)) == 0).all())  # u = 1: magnitude 0
    assert bool((streams.uniform((2,), torch.float64) == (2**53 - 1) * 2.0**-53).all())
    assert bool((streams.integers(7, (3,)) == 6).all())


def test_large_draws_are_made_in_chunks(monkeypatch):
    monkeypatch.setattr(secure_streams, "_CHUNK_WORDS", 64)
    calls = _patch_urandom(monkeypatch, 0x00)
    draws = SecureStreams(3).laplace((50,))
    assert calls == [512, 512, 176] and draws.shape == (3, 50)


def test_seeded_entry_points_refuse():
    streams = SecureStreams(2)
    with pytest.raises(BenchError, match="seeds"):
        streams.seeds_on("cpu")
    with pytest.raises(BenchError, match="seeds"):
        _ = streams.seeds
    with pytest.raises(TypeError):
        SecureStreams.for_images(0, "release/test", 2)


def test_distributions_pass_ks_tests():
    streams = SecureStreams(64)
    shape = (4000,)
    assert stats.kstest(streams.uniform(shape).double().numpy().ravel(), "uniform").pvalue > 1e-3
    assert stats.kstest(streams.uniform(shape, torch.float64).numpy().ravel(), "uniform").pvalue > 1e-3
    assert stats.kstest(streams.normal(shape).double().numpy().ravel(), "norm").pvalue > 1e-3
    assert stats.kstest(streams.laplace(shape, torch.float64).numpy().ravel(), "laplace").pvalue > 1e-3
    counts = np.bincount(streams.integers(7, (2000,)).numpy().ravel(), minlength=7)
    assert stats.chisquare(counts).pvalue > 1e-3


def test_laplace_tail_and_sign_are_faithful():
    draws = SecureStreams(100).laplace((20000,), torch.float64).numpy().ravel()
    for t in (2.0, 5.0, 8.0):
        expected = math.exp(-t)
        assert abs(np.mean(np.abs(draws) > t) - expected) < 5 * math.sqrt(expected / draws.size) + 1e-6
    assert abs(np.mean(draws > 0) - 0.5) < 0.005
    assert np.isfinite(draws).all() and np.abs(draws).max() <= laplace_max_abs()


def test_images_streams_are_independent():
    draws = SecureStreams(200).normal((500,)).double().numpy()
    off = np.corrcoef(draws)[~np.eye(200, dtype=bool)]
    assert np.abs(off).max() < 0.25 and abs(off.mean()) < 0.005


def test_tally_is_shared_by_slices_and_derived_streams():
    streams = SecureStreams(4)
    streams.laplace((3, 2))
    streams.derive("b").laplace((5,))
    streams[0].normal((7,))
    streams.to("cpu").uniform((100,))
    assert (streams.tally.laplace, streams.tally.normal) == (11, 7)


# --- the mechanisms draw through them ---------------------------------------------------


def _images(n: int = 4, size: int = 16) -> torch.Tensor:
    return torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))


def _fitted_dp_latent(images: torch.Tensor, tmp_path) -> object:
    mech = mechanisms.get("dp_latent")(epsilon=10, steps=25, latent_dim=8)
    ctx = RunContext(device=torch.device("cpu"), seed=0, profile="smoke", data_root=None, cache_dir=tmp_path)
    public = _images(32, images.shape[-1])
    mech.fit(ImageSet(public, torch.zeros(len(public), dtype=torch.int64)), ctx)
    return mech


@pytest.mark.parametrize("name, params", [
    ("gaussian_noise", {"sigma": 40}), ("dp_pix", {"epsilon": 1}), ("image_dp", {"epsilon": 1e4}), ("dp_latent", {}),
])
def test_noise_mechanisms_differ_every_release_and_from_the_seeded_one(name, params, tmp_path):
    images = _images()
    mech = _fitted_dp_latent(images, tmp_path) if name == "dp_latent" else mechanisms.get(name)(**params)
    first = mech.apply(images, generator=SecureStreams(4))
    second = mech.apply(images, generator=SecureStreams(4))
    seeded = mech.apply(images, generator=Streams.for_images(0, "release/test", 4))
    assert first.shape == images.shape and first.dtype == torch.uint8
    assert not torch.equal(first, second)
    assert not torch.equal(first, seeded) and not torch.equal(second, seeded)


def test_mechanisms_take_every_value_from_the_secure_words(monkeypatch, tmp_path):
    images = _images()
    dp_pix = mechanisms.get("dp_pix")(epsilon=1, block=4)
    gaussian = mechanisms.get("gaussian_noise")(sigma=40)
    image_dp = mechanisms.get("image_dp")(epsilon=1, block=2, colours=32)
    dp_latent = _fitted_dp_latent(images, tmp_path)
    # All-ones words: Laplace magnitude 0, Box-Muller radius 0, so no noise at all.
    _patch_urandom(monkeypatch, 0xFF)
    means, _ = cell_means(images, 4)
    assert torch.equal(dp_pix.apply(images, generator=SecureStreams(4)), fill_cells(to_uint8(means), 4, 16, 16))
    assert torch.equal(gaussian.apply(images, generator=SecureStreams(4)), images)
    # All-zero words: the largest positive value of every sampler, so everything saturates.
    _patch_urandom(monkeypatch, 0x00)
    assert bool((dp_pix.apply(images, generator=SecureStreams(4)) == 255).all())
    assert bool((gaussian.apply(images, generator=SecureStreams(4)) == 255).all())
    assert bool((image_dp.apply(images, generator=SecureStreams(4)) == 7 * 32 + 16).all())
    latent = dp_latent.apply(images, generator=SecureStreams(4))  # every latent at its upper bound
    assert all(torch.equal(latent[0], latent[i]) for i in range(1, 4))
