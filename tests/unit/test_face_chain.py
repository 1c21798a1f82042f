"""The detection chain: MTCNN, then dlib's HOG detector, then the clean image's face, then a fixed box."""

from __future__ import annotations

import pytest
import torch

from bench.cell.report import _fmt
from bench.errors import BenchError
from bench.faces.align import ARCFACE_TEMPLATE, BOX, CLEAN, DLIB_HOG, MTCNN, Located, centred_boxes, locate, warp
from tests.unit.test_recognizers import orl

pytest.importorskip("dlib")
from bench.faces.chain import check_detectors, hog_upsampling, locate_faces, typical_box  # noqa: E402


@pytest.fixture(scope="module")
def faces() -> dict[str, torch.Tensor]:
    """Ten fixture photos (people 1-2), clean and in dim light (a quarter of the contrast)."""
    images = orl()[0][:10]
    return {"clean": images, "dim": (images.float() * 0.25 + 96).round().to(torch.uint8)}


@pytest.fixture(scope="module")
def dim_chain(faces) -> Located:
    return locate_faces(faces["dim"])


def test_the_chain_falls_back_to_dlib_on_grey_faces_mtcnn_misses(faces, dim_chain):
    alone = locate(faces["dim"])
    assert 2 <= int((~alone.found).sum()) <= 8  # MTCNN misses 5 of the 10 dim faces (when written)
    method = dim_chain.method
    assert torch.equal(method == MTCNN, alone.found)  # what MTCNN finds it keeps, aligned as by MTCNN alone
    assert torch.equal(dim_chain.boxes[alone.found], alone.boxes[alone.found])
    assert torch.equal(dim_chain.points[alone.found], alone.points[alone.found])
    hog = method == DLIB_HOG
    assert int(hog.sum()) >= 2 and bool(dim_chain.found[hog].all())  # 5 when written
    assert bool(dim_chain.points[hog, :2].isfinite().all()) and bool(dim_chain.points[hog, 2:].isnan().all())
    # dlib's eye centres sit where MTCNN puts the same person's eyes on the clean photo (34 px apart)
    clean = locate(faces["clean"])
    assert float((dim_chain.points[hog, :2] - clean.points[hog, :2]).norm(dim=-1).max()) < 8
    assert dim_chain.counts() == {"mtcnn": int(alone.found.sum()), "dlib_hog": int(hog.sum()), "clean": 0,
                                  "box": 10 - int(alone.found.sum()) - int(hog.sum())}


def test_the_chain_is_deterministic(faces, dim_chain):
    again = locate_faces(faces["dim"])
    assert torch.equal(again.method, dim_chain.method) and torch.equal(again.boxes, dim_chain.boxes)
    assert torch.equal(again.points.nan_to_num(-1), dim_chain.points.nan_to_num(-1))


def test_clean_geometry_then_the_fixed_box_take_what_no_detector_finds(faces):
    clean = locate_faces(faces["clean"], detectors=("mtcnn",))
    assert clean.counts()["mtcnn"] == 10
    flat = torch.full_like(faces["dim"], 128)  # no face at all: no detector finds one
    images = torch.cat([faces["dim"][:2], flat[:2]])
    got = locate_faces(images, detectors=("mtcnn", "dlib_hog"), clean=clean.subset(torch.arange(4)))
    assert got.method[2:].tolist() == [CLEAN, CLEAN]
    assert torch.equal(got.boxes[2:], clean.boxes[2:4]) and torch.equal(got.points[2:], clean.points[2:4])
    box = (0.1, 0.2, 0.9, 0.8)
    fixed = locate_faces(flat[:2], detectors=("dlib_hog", "mtcnn"), box=box)
    assert fixed.method.tolist() == [BOX, BOX] and not bool(fixed.found.any())
    assert torch.allclose(fixed.boxes[0], torch.tensor([9.2, 22.4, 82.8, 89.6]))  # 92 x 112 photos
    centred = locate_faces(flat[:1], detectors=("mtcnn",))
    assert torch.equal(centred.boxes, centred_boxes(1, 112, 92)) and typical_box(centred, (112, 92)) is None
    with pytest.raises(BenchError, match="4 images but 3 clean faces"):
        locate_faces(images, clean=clean.subset(torch.arange(3)))


def test_eyes_only_faces_are_warped_with_their_eyes_on_the_template():
    image = torch.zeros(1, 1, 200, 180, dtype=torch.uint8)
    points = ARCFACE_TEMPLATE * 1.3 + torch.tensor([30.0, 40.0])
    for x, y in points[:2].round().long().tolist():
        image[0, 0, y - 1 : y + 2, x - 1 : x + 2] = 255
    eyes = torch.cat([points[:2], torch.full((3, 2), float("nan"))])[None]
    located = Located(centred_boxes(1, 200, 180), eyes, torch.tensor([True]), torch.tensor([DLIB_HOG]))
    out = warp(image, located, ARCFACE_TEMPLATE, 112)[0, 0].float()
    for x, y in ARCFACE_TEMPLATE[:2].round().long().tolist():
        assert out[y - 1 : y + 2, x - 1 : x + 2].max() > 100


def test_detector_names_upsampling_and_the_printed_counts():
    check_detectors(("dlib_hog", "mtcnn"), "owner")
    for bad in (("mtcnn", "mtcnn"), ("hog",), ()):
        with pytest.raises(BenchError, match="detectors must be distinct names of mtcnn, dlib_hog"):
            check_detectors(bad, "owner")
    assert [hog_upsampling(s, s) for s in (32, 45, 64, 92, 480)] == [2, 1, 1, 1, 1]
    assert [hog_upsampling(s, s) for s in (8, 23)] == [3, 2]
    assert _fmt(54.0, "dlib_hog_aligned_probes") == "54" and _fmt(12.0, "box_aligned_gallery_images") == "12"
