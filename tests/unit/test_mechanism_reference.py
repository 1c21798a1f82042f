"""Every mechanism against a slow, per-image, per-cell reference written from the papers.

Noisy mechanisms are compared with the same draws: the reference asks
``Streams(seeds)[i]`` for image i's noise, exactly as a per-image implementation would.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw, ImageFilter

from bench.cell.sheets import sample_sheet
from bench.cli.mechanisms_cmd import parse_sweeps, settings, show_mechanism
from bench.core.interfaces import RunContext
from bench.core.registry import mechanisms
from bench.data.base import ImageSet
from bench.errors import BenchError
from bench.faces.detect import detect_boxes, detector_recall
from bench.randomness.streams import Streams
from bench.release import dataset as release
from bench.testing.references import authors_face_blur
from mechanisms import _blur, _ops, _pil_blur, _threads
from mechanisms._dp import dp_pix_scale, image_dp_levels, image_dp_scale

SAMPLE_PHOTO = Path(__import__("matplotlib").__file__).parent / "mpl-data" / "sample_data" / "grace_hopper.jpg"


def make(name: str, **params):
    return mechanisms.get(name)(**params)


def random_batch(n: int, c: int, h: int, w: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, c, h, w), generator=g, dtype=torch.uint8)


def photo_like_batch(n: int, h: int, w: int, seed: int = 0) -> torch.Tensor:
    """Smooth gradients, flat shapes with hard edges and a little sensor noise."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        yy, xx = np.mgrid[0:h, 0:w]
        base = np.stack([(xx * 255 / max(w - 1, 1)), (yy * 255 / max(h - 1, 1)), np.full((h, w), 90.0)], -1)
        img = Image.fromarray(base.astype(np.uint8))
        draw = ImageDraw.Draw(img)
        for _ in range(4):
            x0, y0 = rng.integers(0, w), rng.integers(0, h)
            draw.ellipse([x0, y0, x0 + rng.integers(3, w), y0 + rng.integers(3, h)], fill=tuple(rng.integers(0, 256, 3).tolist()))
        arr = np.asarray(img).astype(np.int16) + rng.integers(-6, 7, (h, w, 3))
        out.append(np.clip(arr, 0, 255).astype(np.uint8))
    return torch.from_numpy(np.stack(out)).permute(0, 3, 1, 2).contiguous()


def real_photo(h: int = 96, w: int = 80) -> torch.Tensor:
    if not SAMPLE_PHOTO.is_file():
        pytest.skip("matplotlib sample photo not installed")
    img = Image.open(SAMPLE_PHOTO).convert("RGB").resize((w, h), Image.BILINEAR)
    return torch.from_numpy(np.asarray(img).copy()).permute(2, 0, 1)[None].contiguous()


def hwc(t: torch.Tensor) -> np.ndarray:
    return t.permute(1, 2, 0).numpy()


def streams(n: int, seed: int = 7) -> Streams:
    return Streams.for_images(seed, "reference", n)


# --- references -------------------------------------------------------------------------


def ref_cells(h: int, w: int, b: int):
    for top in range(0, h, b):
        for left in range(0, w, b):
            yield top // b, left // b, slice(top, min(top + b, h)), slice(left, min(left + b, w))


def ref_pixelate(img: np.ndarray, b: int) -> np.ndarray:
    h, w, _ = img.shape
    out = np.empty_like(img)
    for _, _, rows, cols in ref_cells(h, w, b):
        mean = img[rows, cols].astype(np.float64).mean(axis=(0, 1))
        out[rows, cols] = np.floor(mean + 0.5).astype(np.uint8)
    return out


def ref_dp_pix(img: np.ndarray, b: int, epsilon: float, m: int, noise: np.ndarray) -> np.ndarray:
    h, w, c = img.shape
    out = np.empty_like(img)
    for i, j, rows, cols in ref_cells(h, w, b):
        cell = img[rows, cols].astype(np.float64)
        count = cell.shape[0] * cell.shape[1]
        scale = 255.0 * m * c / (count * epsilon)
        value = cell.mean(axis=(0, 1)) + noise[:, i, j] * scale
        out[rows, cols] = np.floor(np.clip(value, 0, 255) + 0.5).astype(np.uint8)
    return out


def pil_blur(img: np.ndarray, radius: float) -> np.ndarray:
    grey = img.shape[2] == 1
    pil = Image.fromarray(img[..., 0] if grey else img)
    out = np.asarray(pil.filter(ImageFilter.GaussianBlur(radius)))
    return out[..., None] if grey else out


def assert_close_to_reference(ours: torch.Tensor, ref: np.ndarray, max_diff: int = 0, max_frac: float = 0.0) -> None:
    diff = np.abs(hwc(ours).astype(int) - ref.astype(int))
    assert diff.max() <= max(max_diff, 0 if max_frac == 0 else 1), f"max diff {diff.max()}"
    assert (diff > 0).mean() <= max_frac, f"{(diff > 0).mean():.4%} of values differ"


# --- identity and pixelate ----------------------------------------------------------------


def test_identity_is_a_copy():
    x = random_batch(3, 3, 9, 7)
    out = make("identity").apply(x, generator=streams(3))
    assert torch.equal(out, x) and out.data_ptr() != x.data_ptr()


@pytest.mark.parametrize("shape", [(2, 3, 16, 12), (2, 3, 32, 48), (2, 3, 17, 13), (1, 1, 5, 3), (2, 3, 1, 1)])
@pytest.mark.parametrize("block", [1, 2, 3, 4, 7, 8, 16])
def test_pixelate_matches_reference(shape, block):
    x = random_batch(*shape, seed=block)
    out = make("pixelate", block=block).apply(x, generator=streams(shape[0]))
    for i in range(shape[0]):
        assert np.array_equal(hwc(out[i]), ref_pixelate(hwc(x[i]), block))


def test_pixelate_rounds_half_up():
    x = torch.tensor([[[[1, 2], [1, 2]]]], dtype=torch.uint8)
    out = make("pixelate", block=2).apply(x, generator=streams(1))
    assert out.flatten().tolist() == [2, 2, 2, 2]


def test_pixelate_large_block_uses_wide_sums():
    x = torch.full((1, 3, 40, 40), 255, dtype=torch.uint8)
    out = make("pixelate", block=12).apply(x, generator=streams(1))
    assert torch.equal(out, x)


@pytest.mark.parametrize("block", [4, 8, 64])
def test_packed_cell_sums_do_not_overflow(block):
    x = torch.full((2, 3, 2 * block, block), 255, dtype=torch.uint8)
    x[1] = random_batch(1, 3, 2 * block, block)[0]
    assert _ops._packed_sums_apply(x, block)
    unpacked = _ops._sum_groups(_ops._sum_groups(x, 2, block, torch.int32), 3, block, torch.int32)
    assert torch.equal(_ops.cell_sums(x, block).to(torch.int32), unpacked)


# --- blur --------------------------------------------------------------------------------


@pytest.fixture(params=["auto", "torch"])
def blur_backend(request, monkeypatch):
    """Runs a test with the blur's default backend (Pillow on the CPU) and with its torch code (GPUs)."""
    if request.param != "auto":
        monkeypatch.setattr(_blur, "default_backend", lambda device: request.param)
    return request.param


@pytest.mark.parametrize("radius", [0.0, 0.3, 1.0, 1.5, 2.0, 3.0, 4.2, 5.0, 9.0, 25.0])
def test_blur_matches_pil_on_random_images(radius, blur_backend):
    for shape in [(2, 3, 23, 17), (1, 1, 9, 31), (1, 3, 2, 3), (2, 2, 7, 5)]:
        x = random_batch(*shape, seed=int(radius * 10))
        out = make("blur", radius=radius).apply(x, generator=streams(shape[0]))
        for i in range(shape[0]):
            for c in range(shape[1]):  # channel by channel: Pillow has no 2-channel mode
                assert_close_to_reference(out[i, c : c + 1], pil_blur(hwc(x[i, c : c + 1]), radius))


@pytest.mark.parametrize("radius", [1.0, 2.0, 3.7, 5.0])
def test_blur_matches_pil_on_photo_like_images(radius, blur_backend):
    x = torch.cat([photo_like_batch(2, 48, 40), real_photo()[:, :, :48, :40]])
    out = make("blur", radius=radius).apply(x, generator=streams(len(x)))
    for i in range(len(x)):
        assert_close_to_reference(out[i], pil_blur(hwc(x[i]), radius))


@pytest.mark.parametrize("backend", ["pil", "torch"])
def test_blur_per_image_radii_match_pil(backend):
    x = photo_like_batch(4, 30, 26, seed=3)
    radii = [0.0, 1.3, 4.0, 1.3]
    out = _blur.gaussian_blur(x, radii, backend)
    for i, r in enumerate(radii):
        assert_close_to_reference(out[i], pil_blur(hwc(x[i]), r))


@pytest.mark.parametrize("backend", ["pil", "torch"])
@pytest.mark.parametrize("threads", [1, 2])
def test_blur_chunks_large_batches(monkeypatch, backend, threads):
    monkeypatch.setattr(_blur, "chunk_values", lambda device: 1000)
    monkeypatch.setattr(_pil_blur, "CHUNK_VALUES", 1000)
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    x = random_batch(7, 3, 12, 10)
    radii = [2.0, 2.0, 0.0, 2.0, 7.5, 2.0, 2.0]  # runs of 2 and 3 planes-stacked, single images band by band
    out = _blur.gaussian_blur(x, radii, backend)
    for i, r in enumerate(radii):
        assert_close_to_reference(out[i], pil_blur(hwc(x[i]), r))


def test_pil_plan_stacks_runs_of_one_radius_and_leaves_single_images_alone():
    radii = np.array([2.0, 2.0, 0.0, 2.0, 2.0, 2.0, 7.5, 2.0, 0.0, 7.5])
    runs, singles = _pil_blur.plan(radii, radii > 0)
    assert runs == [(2.0, 0, 2), (2.0, 3, 6)] and singles.tolist() == [6, 7, 9]
    runs, singles = _pil_blur.plan(radii, radii < 0)
    assert runs == [] and singles.tolist() == []
    assert _pil_blur._step(400, 21, threads=2) == 11 and _pil_blur._step(400, 21, threads=4) == 6
    assert _pil_blur._step(1 << 19, 21, threads=1) == 2 and _pil_blur._step(1 << 21, 21, threads=1) == 1


# --- dp_pix ------------------------------------------------------------------------------


@pytest.mark.parametrize("shape,block", [((3, 3, 16, 16), 4), ((2, 3, 18, 13), 4), ((2, 1, 9, 9), 2), ((2, 3, 8, 8), 1), ((2, 3, 16, 24), 8)])
@pytest.mark.parametrize("epsilon", [0.5, 3.0, 50.0])
def test_dp_pix_matches_reference_with_the_same_draws(shape, block, epsilon):
    n, c, h, w = shape
    x = random_batch(*shape, seed=11)
    gen = streams(n)
    out = make("dp_pix", epsilon=epsilon, block=block, m=2).apply(x, generator=gen)
    rows, cols = math.ceil(h / block), math.ceil(w / block)
    for i in range(n):
        noise = gen[i].laplace((c, rows, cols))[0].double().numpy()
        ref = ref_dp_pix(hwc(x[i]), block, epsilon, 2, noise)
        assert_close_to_reference(out[i], ref, max_diff=1, max_frac=0.002)


def test_dp_pix_without_noise_is_pixelate():
    x = random_batch(2, 3, 20, 12)
    out = make("dp_pix", epsilon=1e12, block=4).apply(x, generator=streams(2))
    assert torch.equal(out, make("pixelate", block=4).apply(x, generator=streams(2)))


def test_dp_pix_scale_formula_is_used():
    mech = make("dp_pix", epsilon=3.0, block=4, m=1)
    assert mech.noise_scale(3) == pytest.approx(255 * 3 / (16 * 3)) == dp_pix_scale(3.0, 4, 1, 3)
    assert str(mech.claim()) == "epsilon=3 [m-pixel (m=1)]"


def test_mechanisms_reject_non_uint8_and_wrong_stream_count():
    mech = make("dp_pix")
    with pytest.raises(BenchError, match="uint8"):
        mech.apply(torch.zeros(1, 3, 4, 4), generator=streams(1))
    with pytest.raises(BenchError, match="streams"):
        mech.apply(torch.zeros(2, 3, 4, 4, dtype=torch.uint8), generator=streams(3))


# --- gaussian_noise ----------------------------------------------------------------------


@pytest.mark.parametrize("sigma", [0.0, 5.0, 40.0, 200.0])
def test_gaussian_noise_matches_reference_with_the_same_draws(sigma):
    x = random_batch(3, 3, 11, 9, seed=4)
    gen = streams(3)
    out = make("gaussian_noise", sigma=sigma).apply(x, generator=gen)
    for i in range(3):
        noise = hwc(gen[i].normal(x.shape[1:])[0]).astype(np.float64)
        ref = np.floor(np.clip(hwc(x[i]) + sigma * noise, 0, 255) + 0.5).astype(np.uint8)
        assert_close_to_reference(out[i], ref, max_diff=1, max_frac=0.002)


# --- image_dp ----------------------------------------------------------------------------


def ref_image_dp(img: np.ndarray, b: int, c: int, epsilon: float | None, noise: np.ndarray | None) -> np.ndarray:
    h, w, _ = img.shape
    levels = image_dp_levels(c)
    scale = None if epsilon is None else image_dp_scale(epsilon, w, h, b, c)
    out = np.empty_like(img)
    for i, j, rows, cols in ref_cells(h, w, b):
        value = np.floor(img[rows, cols].astype(np.float64).mean(axis=(0, 1)) + 0.5)
        level = value // c
        if scale is not None:
            level = np.clip(np.floor(level + noise[:, i, j] * scale + 0.5), 0, levels - 1)
        out[rows, cols] = np.minimum(level * c + c // 2, 255).astype(np.uint8)
    return out


@pytest.mark.parametrize("block,colours", [(1, 64), (2, 32), (4, 16), (3, 1), (2, 256), (2, 128)])
@pytest.mark.parametrize("noise_levels", [None, 0.3, 3.0, 1e9])
def test_image_dp_matches_reference_with_the_same_draws(block, colours, noise_levels):
    n, c, h, w = 2, 3, 16, 10
    x = random_batch(n, c, h, w, seed=block * colours)
    sens = image_dp_scale(1.0, w, h, block, colours)
    epsilon = None if noise_levels is None or sens == 0 else sens / noise_levels
    gen = streams(n)
    out = make("image_dp", epsilon=epsilon, block=block, colours=colours).apply(x, generator=gen)
    rows, cols = math.ceil(h / block), math.ceil(w / block)
    for i in range(n):
        noise = None if epsilon is None else gen[i].laplace((c, rows, cols))[0].double().numpy()
        ref = ref_image_dp(hwc(x[i]), block, colours, epsilon, noise)
        diff = np.abs(hwc(out[i]).astype(int) - ref.astype(int))
        assert (diff > 0).mean() <= 0.01 and diff.max() <= colours


def test_image_dp_without_noise_is_pixelate_then_quantise():
    x = random_batch(2, 3, 12, 12)
    out = make("image_dp", epsilon=None, block=2, colours=32).apply(x, generator=streams(2))
    pix = make("pixelate", block=2).apply(x, generator=streams(2)).int()
    assert torch.equal(out.int(), pix // 32 * 32 + 16)
    assert make("image_dp", epsilon=None).claim() is None


def test_image_dp_accepts_any_step_with_a_partial_last_bin():
    x = torch.full((1, 3, 4, 4), 255, dtype=torch.uint8)
    mech = make("image_dp", epsilon=None, block=2, colours=48)
    assert mech.levels == 6 and mech.apply(x, generator=streams(1)).unique().tolist() == [255]


def test_image_dp_claim_unit_and_two_level_caveat():
    claim = make("image_dp", epsilon=2.0, block=2, colours=32).claim()
    assert claim.unit == "any image of this size" and claim.epsilon == 2.0
    caveat = make("image_dp", epsilon=2.0, block=2, colours=128).claim()
    assert caveat.epsilon == 6.0 and "3 x epsilon" in caveat.note


# --- face_blur and face_overlay ----------------------------------------------------------


FACE_BOXES = [
    [[8.0, 6.5, 20.3, 22.0]],
    [[2.0, 2.0, 12.0, 14.0], [10.5, 9.0, 27.9, 31.0]],
    [],
    [[-5.0, 20.0, 9.0, 40.0], [5.0, 5.0, 5.0, 9.0]],
]


def face_boxes() -> list[torch.Tensor]:
    return [torch.tensor(b, dtype=torch.float32).reshape(-1, 4) for b in FACE_BOXES]


def ref_face_blur(img: np.ndarray, boxes: torch.Tensor, measure: str = "diagonal") -> np.ndarray:
    """The authors' released blurring code, with the paper's diagonal or the code's longer side."""
    return authors_face_blur(img, boxes.tolist(), measure)


def ref_face_overlay(img: np.ndarray, boxes: torch.Tensor, colour) -> np.ndarray:
    grey = img.shape[2] == 1
    pil = Image.fromarray(img[..., 0] if grey else img)
    for x0, y0, x1, y1 in boxes.tolist():
        if x0 < x1 and y0 < y1:
            ImageDraw.Draw(pil).rectangle([x0, y0, x1, y1], fill=colour)
    out = np.asarray(pil)
    return out[..., None] if grey else out


@pytest.mark.parametrize("channels", [3, 1])
@pytest.mark.parametrize("measure", ["diagonal", "longer_side"])
def test_face_blur_matches_released_code(channels, measure, blur_backend):
    x = photo_like_batch(4, 36, 30, seed=5)[:, :channels].contiguous()
    boxes = face_boxes()
    out = make("face_blur", measure=measure).apply(x, generator=streams(4), boxes=boxes)
    for i in range(4):
        assert_close_to_reference(out[i], ref_face_blur(hwc(x[i]), boxes[i], measure))
    assert torch.equal(out[2], x[2])


@pytest.mark.parametrize("threads", [1, 2])
def test_face_blur_pieces_of_several_images_match_released_code(monkeypatch, threads):
    monkeypatch.setattr(_pil_blur, "CHUNK_VALUES", 9000)  # pieces of two 4-band 36x30 images
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    x = photo_like_batch(7, 36, 30, seed=9)
    boxes = [face_boxes()[0]] * 3 + face_boxes()[1:3] + [face_boxes()[0]] * 2
    out = make("face_blur").apply(x, generator=streams(7), boxes=boxes)
    for i in range(7):
        assert_close_to_reference(out[i], ref_face_blur(hwc(x[i]), boxes[i]))


@pytest.mark.parametrize("channels", [2, 4, 7])
def test_face_blur_blends_every_channel_as_its_grey_image(channels, blur_backend):
    x = random_batch(4, channels, 36, 30, seed=channels)
    boxes = face_boxes()
    out = make("face_blur").apply(x, generator=streams(4), boxes=boxes)
    for c in range(channels):  # Pillow blends each band on its own, so each channel is a grey image
        alone = make("face_blur").apply(x[:, c : c + 1].contiguous(), generator=streams(4), boxes=boxes)
        assert torch.equal(out[:, c : c + 1], alone), c
    grey = x[:, :1].contiguous()
    assert_close_to_reference(make("face_blur").apply(grey, generator=streams(4), boxes=boxes)[0],
                              ref_face_blur(hwc(grey[0]), boxes[0]))


def test_the_released_codes_longer_side_blurs_less_than_the_diagonal():
    x = photo_like_batch(1, 40, 40, seed=2)
    boxes = [torch.tensor([[10.0, 8.0, 22.0, 30.0]])]
    diagonal = make("face_blur").apply(x, generator=streams(1), boxes=boxes)
    longer = make("face_blur", measure="longer_side").apply(x, generator=streams(1), boxes=boxes)
    assert not torch.equal(diagonal, longer)
    assert (longer.float() - x.float()).abs().sum() < (diagonal.float() - x.float()).abs().sum()


def test_face_blur_on_a_real_photo(blur_backend):
    x = real_photo()
    boxes = [torch.tensor([[22.0, 17.0, 45.0, 45.0]])]
    out = make("face_blur").apply(x, generator=streams(1), boxes=boxes)
    assert_close_to_reference(out[0], ref_face_blur(hwc(x[0]), boxes[0]))
    assert not torch.equal(out, x)


@pytest.mark.parametrize("colour,rgb", [("mean", (124, 116, 104)), ("red", (255, 0, 0)), ("green", (0, 255, 0)), ("blue", (0, 0, 255))])
def test_face_overlay_matches_pil_rectangles(colour, rgb):
    x = random_batch(4, 3, 36, 30, seed=9)
    boxes = face_boxes()
    out = make("face_overlay", colour=colour).apply(x, generator=streams(4), boxes=boxes)
    for i in range(4):
        assert_close_to_reference(out[i], ref_face_overlay(hwc(x[i]), boxes[i], rgb))


def test_face_overlay_grey_uses_luma():
    x = random_batch(4, 1, 36, 30, seed=9)
    out = make("face_overlay", colour="red").apply(x, generator=streams(4), boxes=face_boxes())
    assert int(out[0, 0, 10, 10]) == round(0.299 * 255)


@pytest.mark.parametrize("name", ["face_blur", "face_overlay"])
def test_face_mechanisms_need_boxes(name):
    x = random_batch(2, 3, 8, 8)
    with pytest.raises(BenchError, match="needs face boxes"):
        make(name).apply(x, generator=streams(2))
    with pytest.raises(BenchError, match="boxes for 1 images"):
        make(name).apply(x, generator=streams(2), boxes=face_boxes()[:1])


# --- bench.faces.detect -------------------------------------------------------------------------


def test_detector_recall_matches_one_to_one():
    truth = [torch.tensor([[0.0, 0, 10, 10], [20, 20, 30, 30]]), torch.zeros(0, 4), torch.tensor([[0.0, 0, 4, 4]])]
    pred = [torch.tensor([[1.0, 1, 10, 10], [0.0, 0, 10, 11]]), torch.tensor([[0.0, 0, 5, 5]]), torch.zeros(0, 4)]
    assert detector_recall(pred, truth) == pytest.approx(1 / 3)
    assert detector_recall(pred, truth, iou=0.95) == pytest.approx(0.0)
    assert math.isnan(detector_recall([torch.zeros(0, 4)], [torch.zeros(0, 4)]))
    with pytest.raises(ValueError):
        detector_recall(pred[:1], truth)


def test_detect_boxes_finds_the_face_in_a_real_photo():
    x = real_photo(80, 64)
    blank = torch.zeros_like(x)
    found = detect_boxes(torch.cat([x, blank]), "cpu")
    assert len(found) == 2 and len(found[1]) == 0
    assert detector_recall(found[:1], [torch.tensor([[20.0, 17.0, 44.0, 45.0]])]) == 1.0
    grey = detect_boxes(x[:, :1].contiguous(), "cpu")
    assert len(grey[0]) == 1


# --- dp_latent ---------------------------------------------------------------------------


def latent_context(tmp_path, seed: int = 0) -> RunContext:
    return RunContext(device=torch.device("cpu"), seed=seed, profile="smoke", data_root=None, cache_dir=tmp_path)


def public_set(images: torch.Tensor) -> ImageSet:
    return ImageSet(images=images, labels=torch.zeros(len(images), dtype=torch.int64))


class FlatGenerator:
    """The identity as an encoder/decoder pair: the latent is the image itself."""

    def __init__(self, shape):
        self.shape = shape
        self.latent_dim = math.prod(shape)

    def encode(self, images):
        return images.flatten(1)

    def decode(self, latents):
        return latents.reshape(-1, *self.shape)


def test_dp_latent_matches_reference_with_the_same_draws(tmp_path):
    public = random_batch(24, 3, 16, 12, seed=1)
    mech = make("dp_latent", epsilon=50.0, latent_dim=8, steps=15)
    mech.fit(public_set(public), latent_context(tmp_path))
    x = random_batch(3, 3, 16, 12, seed=2)
    gen = streams(3)
    out = mech.apply(x, generator=gen)
    lower, upper = mech.lower, mech.upper
    scale = (upper - lower) * 8 / 50.0
    for i in range(3):
        with torch.no_grad():
            z = mech.generator.encode(x[i : i + 1].double() / 255)[0]
            z = torch.minimum(torch.maximum(z, lower), upper)
            z = z + gen[i].laplace((8,))[0].double() * scale
            z = torch.minimum(torch.maximum(z, lower), upper)
            img = mech.generator.decode(z[None])[0].double() * 255
        ref = np.floor(np.clip(hwc(img), 0, 255) + 0.5).astype(np.uint8)
        assert_close_to_reference(out[i], ref, max_diff=1, max_frac=0.001)


def test_dp_latent_caches_the_model_by_public_content(tmp_path, monkeypatch):
    public = public_set(random_batch(16, 3, 12, 12, seed=3))
    first = make("dp_latent", latent_dim=4, steps=10)
    first.fit(public, latent_context(tmp_path))
    from bench.storage.cache import Cache

    ctx = latent_context(tmp_path)
    assert Cache(ctx.cache_dir).open("dp_latent", first.cache_key(public, ctx)) is not None
    import mechanisms.dp_latent as dp_latent

    monkeypatch.setattr(dp_latent, "train_autoencoder", lambda *a, **k: pytest.fail("retrained a cached model"))
    again = make("dp_latent", latent_dim=4, steps=10)
    again.fit(public, latent_context(tmp_path))
    x = random_batch(2, 3, 12, 12, seed=4)
    assert torch.equal(first.apply(x, generator=streams(2)), again.apply(x, generator=streams(2)))
    other = public_set(random_batch(16, 3, 12, 12, seed=5))
    assert make("dp_latent").cache_key(other, ctx) != first.cache_key(public, ctx)


def test_dp_latent_accepts_any_generator(tmp_path):
    images = random_batch(8, 1, 6, 5, seed=6)
    mech = make("dp_latent", epsilon=1e9, clip_low=0.0, clip_high=1.0).use_generator(FlatGenerator((1, 6, 5)))
    mech.fit(public_set(images), latent_context(tmp_path))
    assert torch.equal(mech.apply(images, generator=streams(8)), images)
    noisy = make("dp_latent", epsilon=1.0, clip_low=0.0, clip_high=1.0).use_generator(FlatGenerator((1, 6, 5)))
    noisy.fit(public_set(images), latent_context(tmp_path))
    out = noisy.apply(images, generator=streams(8))
    low, high = images.min(0).values, images.max(0).values
    assert ((out >= low) & (out <= high)).all() and not torch.equal(out, images)
    assert str(noisy.claim()) == "epsilon=1 [latent (clipped)]"


def test_dp_latent_errors(tmp_path):
    with pytest.raises(BenchError, match="clip_low"):
        make("dp_latent", clip_low=0.9, clip_high=0.1)
    with pytest.raises(BenchError, match="fitted"):
        make("dp_latent").apply(random_batch(1, 3, 8, 8), generator=streams(1))
    with pytest.raises(BenchError, match="latent generator"):
        make("dp_latent").use_generator(object())
    mech = make("dp_latent", clip_low=0.0, clip_high=1.0).use_generator(FlatGenerator((1, 6, 5)))
    mech.fit(public_set(random_batch(4, 1, 6, 5)), latent_context(tmp_path))
    with pytest.raises(BenchError, match="fitted on images"):
        mech.apply(random_batch(1, 1, 6, 6), generator=streams(1))


# --- sample sheets and `bench mechanisms show` -------------------------------------------


def test_sample_sheet_draws_one_labelled_row_per_setting(tmp_path):
    rows = [("clean", random_batch(3, 3, 10, 8)), ("grey\ntwo lines", random_batch(2, 1, 12, 8))]
    path = sample_sheet(rows, tmp_path / "sub" / "sheet.png", scale=2)
    sheet = np.asarray(Image.open(path))
    assert sheet.shape[0] >= 2 * 24 and sheet.shape[1] > 3 * 16
    with pytest.raises(BenchError):
        sample_sheet([], tmp_path / "empty.png")
    with pytest.raises(BenchError):
        sample_sheet([("float", torch.zeros(1, 3, 4, 4))], tmp_path / "bad.png")


def test_show_mechanism_sweeps_settings_on_given_images(tmp_path):
    images = ImageSet(images=random_batch(10, 3, 16, 16), labels=torch.arange(10), boxes=face_boxes() * 2 + face_boxes()[:2])
    path = show_mechanism(
        "dp_pix", params={"epsilon": "3"}, sweep={"block": ["2", "4"], "m": ["1", "2"]},
        images=images, n=4, out=tmp_path / "dp_pix.png", cache_dir=tmp_path,
    )
    sheet = np.asarray(Image.open(path))
    assert sheet.shape[0] >= 5 * 16 and sheet.shape[1] >= 4 * 16
    show_mechanism("face_overlay", images=images, n=3, out=tmp_path / "overlay.png", cache_dir=tmp_path)
    with pytest.raises(BenchError, match="both"):
        show_mechanism("dp_pix", params={"block": 2}, sweep={"block": [2]}, images=images, out=tmp_path / "x.png")


def test_show_mechanism_settings_and_sweep_parsing():
    assert settings({"epsilon": 3}, {"block": [2, 4]}) == [{"epsilon": 3, "block": 2}, {"epsilon": 3, "block": 4}]
    assert settings({}, {}) == [{}]
    assert parse_sweeps(["block=2, 4,8", "m=1"]) == {"block": ["2", "4", "8"], "m": ["1"]}
    with pytest.raises(BenchError):
        parse_sweeps(["block="])


def test_bench_mechanisms_show_command_on_synth_faces(tmp_path, monkeypatch):
    from bench.cli import main, mechanisms_cmd

    monkeypatch.setitem(mechanisms_cmd.DATASET_OPTIONS, "synth_faces", {"n_ids": 6, "per_id": 2, "size": 32})
    out = tmp_path / "sheet.png"
    args = ["mechanisms", "show", "pixelate", "--sweep", "block=2,8", "--n", "3", "--out", str(out), "--cache-dir", str(tmp_path)]
    assert main(args) == 0 and out.is_file()
    assert main(["mechanisms", "show", "pixelate", "--param", "block=0", "--out", str(out), "--cache-dir", str(tmp_path)]) == 2



# --- chunked batches and the device paths --------------------------------------------------


@pytest.mark.parametrize("name,params", [("pixelate", {"block": 4}), ("dp_pix", {"epsilon": 2.0, "block": 4}),
                                         ("gaussian_noise", {"sigma": 30.0}), ("image_dp", {"epsilon": 5.0})])
def test_chunked_batches_give_the_unchunked_images(name, params, monkeypatch):
    x = random_batch(7, 3, 16, 12, seed=4)
    whole = make(name, **params).apply(x, generator=streams(7))
    monkeypatch.setattr(_ops, "CHUNK_VALUES", 2 * x[0].numel())  # chunks of 2 images, a ragged last one
    assert len(_ops.chunks(x)) == 4
    assert torch.equal(make(name, **params).apply(x, generator=streams(7)), whole)


def test_an_accelerator_takes_chunks_of_a_release_batch():
    assert _ops.chunk_values("cpu") == _ops.CHUNK_VALUES
    assert _ops.chunk_values("cuda") == _ops.chunk_values(torch.device("cuda", 1))
    assert _ops.chunk_values("cuda") == release.DEVICE_BATCH_VALUES  # a release batch is one chunk
    gpu_sized = torch.empty((10_000, 3, 128, 64), dtype=torch.uint8, device="meta")
    assert len(_ops.chunks(gpu_sized)) == 4  # 2,730 images of 128x64 each
    assert len(_ops.chunks(torch.empty(gpu_sized.shape, dtype=torch.uint8))) == 239  # 42 each on the CPU


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("piece_values", [1 << 20, 3240, 6480])
@pytest.mark.parametrize("thread_image_values", [1 << 30, 1])
def test_face_overlay_mask_path_equals_the_slice_path(monkeypatch, piece_values, threads, thread_image_values):
    """The whole-image mask (GPUs) and the per-box slices (CPU) agree.

    The slices are taken whole or in pieces of one or two images, on one thread or with
    helper threads taking pieces beside this one.
    """
    from mechanisms import face
    from mechanisms.face import _flatten_boxes, box_mask

    monkeypatch.setattr(face, "PIECE_VALUES", piece_values)
    monkeypatch.setattr(face, "THREAD_IMAGE_VALUES", thread_image_values)
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    helpers = []

    def counted(main, tasks):
        helpers.append(len(tasks))
        _threads.run_beside(main, tasks)

    monkeypatch.setattr(face, "run_beside", counted)
    x = photo_like_batch(9, 36, 30, seed=6)
    boxes = face_boxes() * 2 + face_boxes()[2:3]  # the last piece has no boxes
    mech = make("face_overlay")
    flat, owner = _flatten_boxes(boxes, [len(b) for b in boxes])
    mask = box_mask(flat, owner, 9, 36, 30).unsqueeze(1)
    masked = torch.where(mask, mech.fill_value(3).view(1, -1, 1, 1), x)
    assert torch.equal(mech.apply(x, generator=streams(9), boxes=boxes), masked)
    pieces = -(-9 // max(1, piece_values // (3 * 36 * 30)))
    assert helpers == [min(threads, pieces) - 1 if thread_image_values == 1 else 0]


def test_face_overlay_helpers_fill_what_they_copied_before_the_boxes_were_known(monkeypatch):
    """A helper that copied every piece while this thread located the boxes fills them all after."""
    import time

    from mechanisms import face

    monkeypatch.setattr(face, "PIECE_VALUES", 3240)  # one 36x30 RGB image a piece
    monkeypatch.setattr(face, "THREAD_IMAGE_VALUES", 1)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    x = photo_like_batch(9, 36, 30, seed=6)
    boxes = face_boxes() * 2 + face_boxes()[2:3]
    made, empty_like, flatten = [], torch.empty_like, face._flatten_boxes

    def recorded_empty_like(*args, **kwargs):
        made.append(empty_like(*args, **kwargs))
        return made[-1]

    def flatten_once_all_is_copied(*args):
        deadline = time.monotonic() + 60
        while not torch.equal(made[0], x):  # the helper copies every piece, filling none yet
            assert time.monotonic() < deadline, "the helper thread never copied the batch"
            time.sleep(0.001)
        return flatten(*args)

    monkeypatch.setattr(torch, "empty_like", recorded_empty_like)
    monkeypatch.setattr(face, "_flatten_boxes", flatten_once_all_is_copied)
    mech = make("face_overlay")
    out = mech.apply(x, generator=streams(9), boxes=boxes)
    monkeypatch.undo()
    assert out is made[0]
    assert torch.equal(out, make("face_overlay").apply(x, generator=streams(9), boxes=boxes))
    assert not torch.equal(out, x)


def test_face_overlay_raises_a_failure_to_locate_the_boxes_once_its_helpers_stop(monkeypatch):
    """An error while this thread locates the boxes neither hangs the helpers nor hides itself."""
    from mechanisms import face

    monkeypatch.setattr(face, "PIECE_VALUES", 3240)
    monkeypatch.setattr(face, "THREAD_IMAGE_VALUES", 1)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)

    def broken(*args):
        raise RuntimeError("no boxes today")

    monkeypatch.setattr(face, "_flatten_boxes", broken)
    with pytest.raises(RuntimeError, match="no boxes today"):
        make("face_overlay").apply(photo_like_batch(9, 36, 30, seed=6), generator=streams(9),
                                  boxes=face_boxes() * 2 + face_boxes()[2:3])


def test_face_overlay_refuses_images_that_are_neither_grey_nor_rgb():
    x = torch.zeros(2, 4, 8, 8, dtype=torch.uint8)
    with pytest.raises(BenchError, match="grey or RGB images, got 4 channels"):
        make("face_overlay").apply(x, generator=streams(2), boxes=[torch.zeros(0, 4)] * 2)
