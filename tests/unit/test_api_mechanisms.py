"""bench.list_mechanisms / bench.load_mechanism: a mechanism on a user's own uint8 tensor, seeded."""

from __future__ import annotations

import pytest
import torch

import bench
from bench.errors import BenchError


def _images(n: int = 3, channels: int = 3) -> torch.Tensor:
    return torch.randint(0, 256, (n, channels, 24, 24), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))


def test_list_mechanisms_matches_a_pattern():
    assert bench.list_mechanisms("dp_*") == ["dp_latent", "dp_pix"]
    assert "identity" in bench.list_mechanisms() and bench.list_mechanisms("nothing*") == []


def test_apply_is_seeded_keeps_shape_and_layout_and_leaves_the_input_alone():
    mech = bench.load_mechanism("dp_pix", epsilon=3, block=4)
    assert mech.params["epsilon"] == 3.0 and mech.claim is not None and not mech.needs_fit
    images = _images()
    before = images.clone()
    out = mech.apply(images, seed=7)
    assert out.dtype == torch.uint8 and out.shape == images.shape and torch.equal(images, before)
    assert torch.equal(out, mech.apply(images, seed=7)) and not torch.equal(out, mech.apply(images, seed=8))
    single = mech.apply(images[0], seed=7)  # [C, H, W] in, [C, H, W] out: the batch's first image
    assert single.shape == images[0].shape and torch.equal(single, out[0])
    grey = bench.load_mechanism("blur", radius=2).apply(_images(2, 1))
    assert grey.shape == (2, 1, 24, 24)


def test_user_errors_are_one_bench_error_each():
    mech = bench.load_mechanism("dp_pix", epsilon=3)
    with pytest.raises(BenchError, match="did you mean 'dp_pix'"):
        bench.load_mechanism("dp_pixx")
    with pytest.raises(BenchError, match="uint8"):
        mech.apply(_images().float())
    with pytest.raises(BenchError, match="channels first"):
        mech.apply(_images().permute(0, 2, 3, 1))
    with pytest.raises(BenchError, match="fit"):
        bench.load_mechanism("dp_latent").apply(_images())
    with pytest.raises(BenchError, match="needs face boxes"):
        bench.load_mechanism("face_blur").apply(_images())
    with pytest.raises(BenchError, match="does not use face boxes"):
        mech.apply(_images(), boxes=[torch.zeros(0, 4)] * 3)


def test_a_box_mechanism_takes_one_box_tensor_per_image():
    boxes = [torch.tensor([[2.0, 2.0, 12.0, 12.0]]), torch.zeros(0, 4), torch.zeros(0, 4)]
    images = _images()
    out = bench.load_mechanism("face_blur").apply(images, boxes=boxes)
    assert torch.equal(out[1], images[1]) and not torch.equal(out[0], images[0])
