"""The peers of benchmarks/peers.py share PrivBench's semantics where its table counts them.

Checks on a few tiny images what the benchmark's agreement section claims; no timing.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import load_benchmark  # tests/conftest.py: benchmarks/ is loaded by path

from bench.core.registry import mechanisms
from bench.randomness.streams import Streams
from bench.testing.mechanisms import synthetic_boxes
from mechanisms._dp import dp_pix_scale

DP = {"epsilon": 3.0, "block": 4, "m": 1}


impls = load_benchmark("_peer_impls")


def batch(n: int, h: int, w: int) -> tuple[torch.Tensor, np.ndarray]:
    images = impls.BM.make_batch(n, 3, h, w)
    return images, np.ascontiguousarray(images.permute(0, 2, 3, 1).numpy())


def grey(n: int = 16, size: int = 32) -> tuple[torch.Tensor, np.ndarray]:
    imgs = np.full((n, size, size, 3), 128, np.uint8)
    return torch.from_numpy(imgs).permute(0, 3, 1, 2).contiguous(), imgs


def privbench(name: str, images: torch.Tensor, boxes=None, **params) -> np.ndarray:
    streams = Streams.for_images(0, "test/peers", len(images))
    return mechanisms.get(name)(**params).apply(images, generator=streams, boxes=boxes).permute(0, 2, 3, 1).numpy()


def run(fn, imgs: np.ndarray, boxes=None, **params) -> np.ndarray:
    rng = np.random.default_rng(0)
    return np.stack([fn(img, bx, rng, **params) for img, bx in zip(imgs, boxes or [[]] * len(imgs))])


def cell_sums(imgs: np.ndarray, b: int) -> np.ndarray:
    n, h, w, c = imgs.shape
    return imgs.reshape(n, h // b, b, w // b, b, c).sum(axis=(2, 4), dtype=np.int64)


def filled(cells: np.ndarray, b: int, h: int, w: int) -> np.ndarray:
    return np.stack([impls.fill_cells(c.astype(np.uint8), b, h, w) for c in cells])


@pytest.mark.parametrize("block", [4, 8])
@pytest.mark.parametrize("size", [(16, 16), (32, 16)])
def test_seeds_and_fewshot_pixelate_equal_privbench(block, size):
    images, imgs = batch(3, *size)
    ours = privbench("pixelate", images, block=block)
    assert np.array_equal(run(impls.seeds_pixelate, imgs, block=block), ours)
    assert np.array_equal(run(impls.fewshot_pixelate, imgs, block=block), ours)


def test_seeds_pixelate_equals_privbench_on_ragged_cells():
    images, imgs = batch(2, 19, 13)
    assert np.array_equal(run(impls.seeds_pixelate, imgs, block=4), privbench("pixelate", images, block=4))


@pytest.mark.parametrize("radius", [2.0, 8.0])
def test_pil_blur_equals_privbench(radius):
    images, imgs = batch(2, 24, 16)
    assert np.array_equal(run(impls.pil_blur, imgs, radius=radius), privbench("blur", images, radius=radius))


def test_face_peers_equal_privbench():
    images, imgs = batch(4, 32, 24)
    boxes_t = synthetic_boxes(4, 32, 24)
    boxes = [b.tolist() for b in boxes_t]
    ours = privbench("face_blur", images, boxes_t, measure="longer_side")
    assert np.array_equal(run(impls.pil_face_blur, imgs, boxes, measure="longer_side"), ours)
    assert np.array_equal(run(impls.pil_face_overlay, imgs, boxes), privbench("face_overlay", images, boxes_t))


def test_dp_pix_peers_with_c_add_the_due_noise():
    images, imgs = grey()
    due = math.sqrt(2) * dp_pix_scale(3.0, 4, 1, 3)
    assert impls.cell_noise(privbench("dp_pix", images, **DP), 128, 4).std() == pytest.approx(due, rel=0.1)
    for fn in (impls.seeds_dp_pix, impls.fewshot_dp_pix):
        assert impls.cell_noise(run(fn, imgs, **DP), 128, 4).std() == pytest.approx(due, rel=0.1)


def test_seba_dp_pix_adds_a_cth_of_the_noise_and_crashes_higher_than_wide():
    images, imgs = grey()
    ours = impls.cell_noise(privbench("dp_pix", images, **DP), 128, 4).std()
    seba = impls.cell_noise(run(impls.seba_dp_pix, imgs, **DP), 128, 4).std()
    assert seba == pytest.approx(ours / 3, rel=0.1)
    assert seba == pytest.approx(math.sqrt(2) * dp_pix_scale(3.0, 4, 1, 1), rel=0.1)
    with pytest.raises(IndexError, match="shape"):
        run(impls.seba_dp_pix, batch(1, 32, 16)[1], **DP)


def test_seeds_gaussian_noise_has_mean_0_and_std_sigma():
    images, imgs = grey(4)
    for out in (privbench("gaussian_noise", images, sigma=40.0), run(impls.seeds_gaussian_noise, imgs, sigma=40.0)):
        noise = out.astype(np.float64) - 128
        assert abs(noise.mean()) < 1.0 and noise.std() == pytest.approx(40.0, rel=0.05)


def test_peers_of_other_semantics_never_count():
    assert {p.name: p.kind for p in impls.peers_for("dp_pix", DP)} == {
        "seeds": "distribution", "fewshot": "distribution", "SEBA": "different"}
    for name, params in [("blur", {"radius": 2.0}), ("gaussian_noise", {"sigma": 40.0})]:
        assert all(p.kind == "different" for p in impls.peers_for(name, params) if p.name == "SEBA")


def test_agreement_reports_exact_and_half_way_differences():
    images, imgs = batch(2, 16, 16)
    ours = privbench("pixelate", images, block=4)
    peer = impls.peers_for("pixelate", {"block": 4})[0]
    assert impls.agreement(peer, "pixelate", {"block": 4}, ours, ours.copy(), imgs) == ("exact", True)
    off = ours.copy()
    off[0, 0, 0, 0] ^= 1
    text, same = impls.agreement(peer, "pixelate", {"block": 4}, ours, off, imgs)
    assert not same and "max 1" in text


def test_cv2_pixelate_rounds_half_way_means_to_even():
    pytest.importorskip("cv2")
    images, imgs = batch(3, 32, 16)
    means = cell_sums(imgs, 4) / 16
    theirs = run(impls.seba_pixelate, imgs, block=4)
    assert np.array_equal(theirs, filled(np.round(means), 4, 32, 16))  # numpy rounds half to even
    assert np.array_equal(privbench("pixelate", images, block=4), filled(np.floor(means + 0.5), 4, 32, 16))
    assert not np.array_equal(theirs, filled(np.floor(means + 0.5), 4, 32, 16))


def test_cv2_noise_is_never_negative():
    pytest.importorskip("cv2")
    _, imgs = grey(4)
    noise = run(impls.seba_gaussian_noise, imgs, sigma=40.0).astype(np.float64) - 128
    assert noise.min() >= 0 and noise.mean() == pytest.approx(40.0 / math.sqrt(2 * math.pi), rel=0.05)


def test_cv2_face_overlay_equals_privbench():
    pytest.importorskip("cv2")
    images, imgs = batch(4, 32, 24)
    boxes_t = synthetic_boxes(4, 32, 24)
    theirs = run(impls.cv2_face_overlay, imgs, [b.tolist() for b in boxes_t])
    assert np.array_equal(theirs, privbench("face_overlay", images, boxes_t))


@pytest.mark.parametrize("keep", [True, False])
def test_a_timed_peer_holds_every_output_until_its_run_ends(keep):
    # Released images are all written to memory, as PrivBench's batch is: a peer that drops
    # each output before the next one writes into the same cached block every time.
    peers, alive, most = load_benchmark("peers"), [0], [0]

    class Output:
        def __init__(self):
            alive[0] += 1
            most[0] = max(most[0], alive[0])

        def __del__(self):
            alive[0] -= 1

    peers.timing.run_peer(lambda img, boxes, rng: Output(), np.zeros((6, 2, 2, 3), np.uint8), [[]] * 6, None, 1, 6, keep)
    assert most[0] == (5 if keep else 1)
    assert alive[0] == 0


def test_privbench_and_the_peers_are_timed_in_interleaved_rounds_each_after_an_untimed_run():
    peers, calls = load_benchmark("peers"), []

    def release():
        calls.append(("ours", torch.get_num_threads()))

    class Pool:
        def warm(self, peer, keep):
            calls.append(("pool warm", peer.name))

        def seconds(self, peer, count, keep):
            calls.append(("pool", peer.name, count))
            return 0.5

    def fn(img, boxes, rng):
        calls.append("alone")
        return img

    peer = impls.Peer("SEBA", "test", fn)
    res = peers.PeerResult(peer, images=3)
    batch = peers.PeerBatch(np.zeros((4, 2, 2, 3), np.uint8), [[]] * 4, Pool(), True)
    seconds = peers.time_rounds(release, [1, 2], [res], batch, repeats=2)
    one_round = [("ours", 1), ("ours", 1), ("ours", 2), ("ours", 2),  # untimed, then timed
                 *["alone"] * 2, *["alone"] * 3,  # two images untimed, then the three timed
                 ("pool warm", "SEBA"), ("pool", "SEBA", 3)]
    assert calls == one_round * 2
    assert set(seconds) == {1, 2} and res.rate_pool == pytest.approx(3 / 0.5) and res.rate1 > 0


def test_peers_main_runs_on_a_tiny_batch(tmp_path, capsys):
    peers = load_benchmark("peers")
    out = tmp_path / "peers.md"
    assert peers.main(["--n", "6", "--repeats", "1", "--sizes", "16x16", "--mechanisms", "pixelate", "face_overlay",
                       "--skip-scale", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "1 interleaved rounds" in text and "face_overlay" in text and "pixelate b=4" in text
    assert "| face_overlay |" in out.read_text()
