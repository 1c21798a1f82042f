"""Mechanisms that fit do so on public data that is never released; otherwise the claim is withheld."""

from __future__ import annotations

import hashlib

import torch

from bench.core.interfaces import RunContext
from bench.core.registry import mechanisms
from bench.data.base import ImageSet, Splits
from bench.data.synthetic.synth_faces import SynthFaces
from bench.release.dataset import make_release
from tests.fixtures.celeba_fixture import write_celeba

SMALL = {"n_ids": 12, "per_id": 4, "split_ids": [6, 3, 3], "size": 32}


def ctx(tmp_path) -> RunContext:
    return RunContext(device=torch.device("cpu"), seed=0, profile="smoke", data_root=None, cache_dir=tmp_path)


def digests(images: torch.Tensor) -> set[str]:
    return {hashlib.sha256(image.numpy().tobytes()).hexdigest() for image in images}


def test_synth_faces_public_data_is_other_people_than_every_split(tmp_path):
    dataset = SynthFaces()
    splits = dataset.load(None, SMALL, tmp_path)
    public = dataset.load_public(None, SMALL, tmp_path)
    assert len(public) == 6 * 4
    released_ids = set(torch.cat([s.labels for s in splits.sets.values()]).tolist())
    assert not released_ids & set(public.labels.tolist())
    released = set().union(*(digests(s.images) for s in splits.sets.values()))
    assert not released & digests(public.images)
    again = dataset.load(None, SMALL, tmp_path)
    assert again.fingerprint == splits.fingerprint  # public data changes nothing that is released


def test_dp_latent_fits_on_the_public_split_and_its_claim_covers_every_released_split(tmp_path, monkeypatch):
    dataset = SynthFaces()
    splits = dataset.load(None, SMALL, tmp_path)
    public = dataset.load_public(None, SMALL, tmp_path)
    mechanism = mechanisms.get("dp_latent")(epsilon=50, steps=5, latent_dim=4)
    seen = []
    real_fit = type(mechanism).fit
    monkeypatch.setattr(type(mechanism), "fit", lambda self, data, c: seen.append(data) or real_fit(self, data, c))
    release = make_release(splits, mechanism, ctx(tmp_path), lambda: public)
    (fitted,) = seen
    assert digests(fitted.images) == digests(public.images)
    for name, split in release.splits.sets.items():
        assert not digests(splits[name].images) & digests(fitted.images), name
    assert release.claim is not None and release.claim.withheld == ()
    assert "reproducible" in release.claim.note


def test_without_public_data_the_claim_is_withheld_for_the_split_fitted_on(tmp_path):
    splits = SynthFaces().load(None, SMALL, tmp_path)
    release = make_release(splits, mechanisms.get("dp_latent")(epsilon=50, steps=5, latent_dim=4), ctx(tmp_path))
    assert release.claim.withheld == ("train",) and "fitted on it" in release.claim.note
    assert "withheld for train" in str(release.claim)


def test_mechanisms_that_do_not_fit_never_load_public_data(tmp_path):
    splits = SynthFaces().load(None, SMALL, tmp_path)

    def public() -> ImageSet:
        raise AssertionError("loaded public data for a mechanism that does not fit")

    release = make_release(splits, mechanisms.get("dp_pix")(epsilon=3, block=4), ctx(tmp_path), public)
    assert release.claim.withheld == () and release.claim.epsilon == 3


def test_the_laplace_clamp_adds_its_delta_to_a_benchmark_claim(tmp_path):
    splits = SynthFaces().load(None, SMALL, tmp_path)
    low = make_release(splits, mechanisms.get("dp_pix")(epsilon=1, block=4), ctx(tmp_path)).claim
    high = make_release(splits, mechanisms.get("dp_pix")(epsilon=100, block=4), ctx(tmp_path)).claim
    assert low.delta == 0.0
    assert 0.01 < high.delta < 0.1 and "clamp" in high.note


def test_celeba_public_identities_are_in_no_split(tmp_path):
    from bench.data.loaders.celeba import CelebA

    fx = write_celeba(tmp_path / "data", n_ids=6, per_id=3, small_ids=3)
    options = {"min_images": 3, "size": 32, "split_fractions": (0.5, 0.25, 0.25)}
    splits = CelebA().load(fx.root, options, tmp_path / "cache")
    public = CelebA().load_public(fx.root, options, tmp_path / "cache")
    assert public is not None and len(public) > 0
    used = set(torch.cat([s.labels for s in splits.sets.values()]).tolist())
    assert not used & set(public.labels.tolist())
    assert isinstance(splits, Splits)
