"""Per-image random streams and derived seeds."""

from __future__ import annotations

import torch

from bench.randomness.seeding import derive_seed, image_seeds
from bench.randomness.streams import Streams


def test_derived_seeds_depend_on_seed_and_purpose():
    assert derive_seed(0, "a") == derive_seed(0, "a")
    assert len({derive_seed(0, "a"), derive_seed(1, "a"), derive_seed(0, "b")}) == 3


def test_image_seeds_do_not_depend_on_batching():
    whole = image_seeds(7, "release/test", 100)
    parts = torch.cat([image_seeds(7, "release/test", 30, start=0), image_seeds(7, "release/test", 70, start=30)])
    assert torch.equal(whole, parts)
    assert len(set(whole.tolist())) == 100 and bool((whole >= 0).all())


def test_streams_are_per_image():
    streams = Streams.for_images(3, "p", 5)
    batch = streams.normal((2, 4))
    singles = torch.cat([streams[i].normal((2, 4)) for i in range(5)])
    assert torch.equal(batch, singles)
    assert not torch.equal(batch[0], batch[1])


def test_laplace_has_unit_scale():
    draws = Streams.for_images(0, "laplace", 200).laplace((500,))
    assert abs(draws.mean().item()) < 0.02
    assert abs(draws.abs().mean().item() - 1.0) < 0.02
    assert torch.isfinite(draws).all()
