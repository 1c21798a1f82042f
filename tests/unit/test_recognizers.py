"""Pretrained recognizers: alignment maths, verification maths, and the backends on real faces (ORL)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from bench.errors import BenchError
from bench.faces.align import ARCFACE_TEMPLATE, Located, centred_boxes, crop, locate, similarity, warp
from bench.faces.identify import Gallery, fuse, hits, tar_at_far, verification
from bench.faces.recognizers import load_recognizer

ORL = Path(__file__).resolve().parents[1] / "fixtures" / "faces_orl"


def orl() -> tuple[torch.Tensor, np.ndarray]:
    """The fixture's 40 real faces (8 people x 5) as uint8 [40, 1, 112, 92], with their identities."""
    files = sorted(ORL.glob("s*_*.png"), key=lambda f: (int(f.stem.split("_")[0][1:]), int(f.stem.split("_")[1])))
    images = torch.stack([torch.from_numpy(np.array(Image.open(f)))[None] for f in files])
    return images, np.array([int(f.stem.split("_")[0][1:]) for f in files])


def test_similarity_recovers_a_known_transform_exactly():
    angle, scale, shift = 0.3, 1.7, torch.tensor([5.0, -2.0])
    rot = torch.tensor([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    target = (ARCFACE_TEMPLATE @ rot.T) * scale + shift
    m = similarity(ARCFACE_TEMPLATE, target[None])[0]
    assert torch.allclose(m[:, :2], rot * scale, atol=1e-4) and torch.allclose(m[:, 2], shift, atol=1e-3)


def test_warp_puts_the_landmarks_on_the_template():
    # an image with a bright dot at each of five landmarks, moved by a similarity transform
    image = torch.zeros(1, 1, 200, 180, dtype=torch.uint8)
    points = (ARCFACE_TEMPLATE * 1.3 + torch.tensor([30.0, 40.0]))
    for x, y in points.round().long().tolist():
        image[0, 0, y - 1 : y + 2, x - 1 : x + 2] = 255
    located = Located(centred_boxes(1, 200, 180), points[None], torch.tensor([True]))
    out = warp(image, located, ARCFACE_TEMPLATE, 112)[0, 0].float()
    for x, y in ARCFACE_TEMPLATE.round().long().tolist():
        assert out[y - 1 : y + 2, x - 1 : x + 2].max() > 100  # the dot landed on its template point


def test_crop_of_the_whole_image_box_is_the_image_resized():
    image = torch.arange(64, dtype=torch.uint8).reshape(1, 1, 8, 8).repeat(1, 1, 1, 1) * 3
    located = Located(torch.tensor([[0.0, 0.0, 8.0, 8.0]]), torch.full((1, 5, 2), float("nan")), torch.tensor([False]))
    assert torch.equal(crop(image, located, 8), image)


def test_tar_at_far_counts_genuine_pairs_above_the_impostor_threshold():
    rng = np.random.default_rng(0)
    ids, truth = np.arange(50), np.repeat(np.arange(50), 2)  # 100 probes x 50 templates: 4,900 impostor pairs
    scores = rng.uniform(0, 0.5, (100, 50))
    scores[np.arange(100), truth] = np.r_[np.full(60, 0.9), np.full(40, 0.1)]  # 60 genuine pairs score high
    assert tar_at_far(scores, ids, truth, 1e-3) == pytest.approx(0.6)
    assert math.isnan(tar_at_far(scores[:10, :10], ids[:10], truth[:10] % 10, 1e-3))  # 90 impostor pairs < 1,000
    assert set(verification(scores, ids, truth, "_clean")) == {"tar_far1e-3_clean", "tar_far1e-2_clean"}


def test_a_gallery_identifies_by_its_templates_and_fusion_averages():
    emb = np.eye(3, dtype=np.float32)
    gallery = Gallery.enrol(np.repeat(emb, 2, axis=0), np.array([7, 7, 8, 8, 9, 9]))
    assert hits(gallery.scores(emb), gallery.ids, np.array([7, 8, 9])).all()
    assert np.allclose(fuse([np.ones((2, 2)), np.zeros((2, 2))]), 0.5)


def test_dlib_identifies_real_faces_it_never_trained_on():
    images, labels = orl()
    rec = load_recognizer("dlib")
    located = locate(images, min_face=20)
    emb = rec.embed(images, located)
    assert emb.shape == (40, 128) and np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-5)
    enrol = np.arange(40) % 5 == 0  # one photo a person enrolled, four probed
    gallery = Gallery.enrol(emb[enrol], labels[enrol])
    top1 = hits(gallery.scores(emb[~enrol]), gallery.ids, labels[~enrol]).mean()
    assert top1 >= 0.9, top1  # 1.0 when written (chance 0.125)


def test_facenet_reads_a_local_state_dict_and_refuses_other_files(tmp_path):
    from facenet_pytorch import InceptionResnetV1

    torch.manual_seed(0)
    torch.save(InceptionResnetV1(pretrained=None, classify=False).state_dict(), tmp_path / "random.pt")
    images, _ = orl()
    rec = load_recognizer("facenet", str(tmp_path / "random.pt"))
    emb = rec.embed(images[:4], locate(images[:4]))
    assert emb.shape == (4, 512) and np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-5)
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    with pytest.raises(BenchError, match="cannot read .* as a state dict"):
        load_recognizer("facenet", str(tmp_path / "notes.txt"))
    torch.save({"conv.weight": torch.zeros(2)}, tmp_path / "other.pt")
    with pytest.raises(BenchError, match="not an Inception-ResNet-v1 state dict"):
        load_recognizer("facenet", str(tmp_path / "other.pt"))


def test_onnx_runs_a_local_model_on_aligned_112_pixel_faces(tmp_path):
    pytest.importorskip("onnxruntime")
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, stride=4), torch.nn.Flatten(), torch.nn.LazyLinear(16))
    model(torch.zeros(1, 3, 112, 112))
    path = tmp_path / "rec.onnx"
    try:
        torch.onnx.export(model, (torch.zeros(2, 3, 112, 112),), str(path), input_names=["input.1"],
                          dynamic_axes={"input.1": {0: "n"}}, dynamo=False)
    except Exception as exc:  # the exporter itself may need the onnx package
        pytest.skip(f"torch cannot export ONNX here: {type(exc).__name__}")
    images, _ = orl()
    rec = load_recognizer("onnx", str(path))
    located = locate(images[:3])
    emb = rec.embed(images[:3], located)
    expected = model((warp(images[:3].expand(-1, 3, -1, -1), located, ARCFACE_TEMPLATE, 112).float() - 127.5) / 127.5)
    expected = torch.nn.functional.normalize(expected, dim=1).detach().numpy()
    assert np.allclose(emb, expected, atol=1e-4)
    (tmp_path / "bad.onnx").write_bytes(b"garbage")
    with pytest.raises(BenchError, match="cannot load"):
        load_recognizer("onnx", str(tmp_path / "bad.onnx"))


def test_missing_weights_and_packages_are_one_line_naming_what_to_supply(monkeypatch):
    with pytest.raises(BenchError, match="facenet_weights=PATH"):
        load_recognizer("facenet")
    with pytest.raises(BenchError, match="does not exist"):
        load_recognizer("onnx", "/nonexistent/arcface.onnx")
    import importlib.util

    import bench.faces.dlib_resnet as dlib_resnet

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "face_recognition_models" else real(name, *a))
    with pytest.raises(BenchError, match=r"privbench\[faces\]"):
        dlib_resnet.model_files()
