"""The pretrained face adversaries on real faces (ORL fixture): clean, adapted, restored, ensemble."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bench.core.interfaces import Release, RunContext
from bench.core.registry import attacks, mechanisms
from bench.data.base import ImageSet, Splits
from bench.release.dataset import apply_to_split
from tests.unit.test_recognizers import orl


@pytest.fixture(scope="module")
def people() -> Splits:
    """Two people are the adversary's own (train), six are the targets (test): 5 photos each."""
    images, labels = orl()
    own = torch.from_numpy(labels <= 2)
    sets = {"train": ImageSet(images[own], torch.from_numpy(labels[own.numpy()])),
            "test": ImageSet(images[~own], torch.from_numpy(labels[~own.numpy()]))}
    return Splits("orl", sets, "orl-fixture")


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One cache for the module: the clean split is embedded once."""
    return tmp_path_factory.mktemp("pretrained-cache")


def ctx(tmp_path, logs=None) -> RunContext:
    return RunContext(device=torch.device("cpu"), seed=0, profile="smoke", data_root=None, cache_dir=tmp_path,
                      log=(logs.append if logs is not None else lambda m: None))


def release(people: Splits, name: str, context: RunContext, **params) -> Release:
    if name == "identity":
        return Release(people, "identity", {}, 0, "identity")
    mech = mechanisms.get(name)(**params)
    out = {split: apply_to_split(mech, people[split], context, f"release/{split}")[0] for split in people.sets}
    return Release(people.replace_images(out), name, params, 0, f"{name}-{params}", instance=mech)


def run(name: str, people: Splits, released: Release, context: RunContext, **settings):
    attack = attacks.get(name)("smoke", {"enrol_per_id": 2, **settings})
    attack.check_data(None)
    return attack.run(people, released, context)


def test_clean_probes_are_identified_far_above_chance(shared, people):
    context = ctx(shared)
    outcome = run("face_reid_pretrained", people, release(people, "identity", context), context)
    m = outcome.metrics
    assert m["chance"] == pytest.approx(1 / 6) and m["probes"] == 18
    assert m["top1"] == m["top1_clean"] >= 0.9  # 1.0 when written
    assert math.isnan(m["tar_far1e-2"]) and math.isnan(m["tar_far1e-3_clean"])  # 90 impostor pairs: too few
    assert m["mtcnn_aligned_probes"] == 18 and m["mtcnn_aligned_gallery_images"] == 12  # MTCNN finds every one
    assert m["dlib_hog_aligned_probes"] == m["clean_aligned_probes"] == m["box_aligned_probes"] == 0
    assert outcome.privacy() == 0.0


def dimmed(people: Splits) -> Release:
    """The photos in dim light (a fifth of the contrast): MTCNN misses faces dlib's HOG detector finds."""
    out = {split: (people[split].images.float() * 0.2 + 100).round().to(torch.uint8) for split in people.sets}
    return Release(people.replace_images(out), "dim", {}, 0, "dim-0.2")


def test_probes_mtcnn_misses_are_aligned_by_dlib_and_every_method_is_counted(tmp_path, shared, people):
    logs: list[str] = []
    context = ctx(shared, logs)
    released = dimmed(people)
    m = run("face_reid_pretrained", people, released, context).metrics
    counts = {method: m[f"{method}_aligned_probes"] for method in ("mtcnn", "dlib_hog", "clean", "box")}
    assert sum(counts.values()) == m["probes"] == 18 and m["mtcnn_aligned_gallery_images"] == 12
    assert counts["dlib_hog"] >= 3 and counts["mtcnn"] >= 8 and counts["clean"] == 0  # 6 and 12 when written
    assert any(f"dlib_hog {counts['dlib_hog']:.0f}" in line for line in logs if "released probe images aligned" in line)
    assert m["top1"] >= 0.8  # 1.0 when written: dim faces are still known
    mtcnn_only = run("face_reid_pretrained", people, released, context, detectors="mtcnn", clean_geometry=True).metrics
    assert mtcnn_only["dlib_hog_aligned_probes"] == 0 and mtcnn_only["mtcnn_aligned_probes"] == counts["mtcnn"]
    assert mtcnn_only["clean_aligned_probes"] == 18 - counts["mtcnn"]  # the clean probes' faces, where allowed
    again = run("face_reid_pretrained", people, released, ctx(tmp_path)).metrics
    assert np.allclose(list(again.values()), list(m.values()), equal_nan=True)  # recomputed: the same numbers


def test_a_strong_pixelation_lowers_top1_and_the_adapted_gallery_is_reported(shared, people):
    context = ctx(shared)
    released = release(people, "pixelate", context, block=16)
    plain = run("face_reid_pretrained", people, released, context)
    adapted = run("face_reid_pretrained_adapted", people, released, context)
    assert plain.metrics["top1"] < plain.metrics["top1_clean"]
    assert adapted.metrics["top1_clean"] == plain.metrics["top1_clean"]
    assert 0.0 <= adapted.metrics["top1"] <= 1.0 and adapted.privacy() is not None


def test_restored_probes_go_through_the_denoise_adversarys_dncnn(shared, people):
    context = ctx(shared)
    released = release(people, "blur", context, radius=3)
    outcome = run("face_reid_pretrained_restored", people, released, context, **{"denoise.epochs": 2})
    assert (shared / "models").exists()  # the DnCNN, cached like denoise's own
    assert 0.0 <= outcome.metrics["top1"] <= 1.0 and outcome.metrics["top1_clean"] >= 0.9


def test_clean_embeddings_are_cached_and_released_ones_reused_within_a_release(tmp_path, people):
    logs: list[str] = []
    context = ctx(tmp_path, logs)
    released = release(people, "pixelate", context, block=8)
    first = run("face_reid_pretrained", people, released, context).metrics
    embedded = [line for line in logs if "embedding" in line]
    assert len(embedded) == 2  # the clean split, the released probes
    logs.clear()
    again = run("face_reid_pretrained", people, released, context).metrics
    assert np.allclose(list(again.values()), list(first.values()), equal_nan=True) and list(again) == list(first)
    assert not [line for line in logs if "embedding" in line]


def test_an_ensemble_fuses_backends_and_reports_each(tmp_path, shared, people):
    from facenet_pytorch import InceptionResnetV1

    torch.manual_seed(0)
    torch.save(InceptionResnetV1(pretrained=None, classify=False).state_dict(), tmp_path / "random.pt")
    context = ctx(shared)
    released = release(people, "identity", context)
    outcome = run("face_reid_pretrained", people, released, context, backends="dlib,facenet",
                  facenet_weights=str(tmp_path / "random.pt"))
    m = outcome.metrics
    assert {"top1.dlib", "top1.facenet", "top1.dlib_clean", "top1.facenet_clean"} <= set(m)
    assert m["top1.dlib"] >= 0.9 and m["top1.facenet"] < m["top1.dlib"]  # random weights: near chance
    assert 0.0 <= m["top1"] <= 1.0


def test_unknown_backends_and_missing_weights_fail_before_any_work():
    from bench.errors import BenchError

    with pytest.raises(BenchError, match="backends must be distinct names"):
        attacks.get("face_reid_pretrained")("smoke", {"backends": "dlib,arcface"})
    with pytest.raises(BenchError, match="facenet_weights=PATH"):
        attacks.get("face_reid_pretrained")("smoke", {"backends": "facenet"}).check_data(None)
