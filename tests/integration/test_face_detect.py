"""face_detect: MTCNN finds the faces of clean images, not those a face obfuscation removed."""

from __future__ import annotations

import pytest
import torch

import bench
from bench.faces.detect import detector_recall, face_hits


def test_face_hits_match_one_to_one_by_iou():
    truth = [torch.tensor([[0.0, 0.0, 10.0, 10.0], [20.0, 20.0, 30.0, 30.0]]), torch.zeros((0, 4))]
    pred = [torch.tensor([[1.0, 1.0, 10.0, 10.0], [0.0, 0.0, 9.0, 9.0]]), torch.tensor([[0.0, 0.0, 5.0, 5.0]])]
    assert face_hits(pred, truth).tolist() == [True, False]  # two detections, one face: one hit
    assert detector_recall(pred, truth) == 0.5
    assert face_hits(pred, truth, iou=0.95).tolist() == [False, False]


@pytest.fixture(scope="module")
def cells(tmp_path_factory, shared_cache):
    results = tmp_path_factory.mktemp("detect") / "results"
    return {m: bench.run(mechanism=m, task="fewshot_synth_faces", profile="smoke", attacks=["face_detect"],
                         settings={"task.epochs": 1}, results_dir=results, cache_dir=shared_cache)
            for m in ("identity", "face_blur")}


def test_identity_leaves_every_face_the_clean_detector_finds(cells):
    metrics = cells["identity"].attacks["face_detect"]
    assert metrics["detect_rate_clean"] > 0.2 and metrics["detect_rate"] == metrics["detect_rate_clean"]
    assert cells["identity"].privacy["face_detect"] == 0.0
    assert metrics["faces"] == metrics["images"] == 48


def test_face_blur_hides_the_faces_from_the_detector(cells):
    metrics = cells["face_blur"].attacks["face_detect"]
    assert metrics["detect_rate"] < 0.2 * metrics["detect_rate_clean"]
    assert cells["face_blur"].privacy["face_detect"] >= 0.8
    assert "face_detect" in cells["face_blur"].groups["attacks"]
