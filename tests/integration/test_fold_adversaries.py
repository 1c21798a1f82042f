"""Face adversaries in folds on a small dataset: every identity a target, probes pooled, same probes for all."""

from __future__ import annotations

import pytest
import torch

from bench.core.interfaces import Release, RunContext
from bench.core.registry import attacks, mechanisms
from bench.data.base import load_dataset
from bench.release.dataset import apply_to_split

FOLDS = {"folds": 2, "fold_below": 20, "enrol_per_id": 4, "epochs": 1}


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """Twelve synthetic people of 8 photos (32 x 32): 6 train, 2 val, 4 test (too few targets without folds)."""
    cache = tmp_path_factory.mktemp("folds")
    options = {"n_ids": 12, "per_id": 8, "split_ids": [6, 2, 4], "variation": 2.0, "size": 32}
    clean = load_dataset("synth_faces", None, options, cache)
    ctx = RunContext(device=torch.device("cpu"), seed=0, profile="smoke", data_root=None, cache_dir=cache)
    mech = mechanisms.get("pixelate")(block=8)
    out = {split: apply_to_split(mech, clean[split], ctx, f"release/{split}")[0] for split in clean.sets}
    return clean, Release(clean.replace_images(out), "pixelate", {"block": 8}, 0, "pixelate-8", instance=mech), ctx


def test_trained_face_adversaries_fold_over_every_identity_and_attack_the_same_probes(small):
    clean, released, ctx = small
    outcomes = {
        "face_reid": attacks.get("face_reid")("smoke", FOLDS).run(clean, released, ctx),
        "face_reid_adapted": attacks.get("face_reid_adapted")("smoke", FOLDS).run(clean, released, ctx),
        "denoise": attacks.get("denoise")("smoke", {**{f"reid.{k}": v for k, v in FOLDS.items()},
                                                    "targets": ["identity"], "epochs": 1}).run(clean, released, ctx),
    }
    first = outcomes["face_reid"]
    for name, outcome in outcomes.items():
        m = outcome.metrics
        assert m["folds"] == 2 and m["identities"] == 12 and m["probes"] == outcome.trials == 12 * 4, name
        assert m["top1_clean"] == first.metrics["top1_clean"] and m["chance"] == pytest.approx(1 / 6), name
        assert outcome.privacy_se() is None or 0 < outcome.privacy_se() < 0.3
    assert outcomes["denoise"].metrics["denoiser_trained"] == 1.0
    models = {p.parent.name for p in (ctx.cache_dir / "models").rglob("*") if p.is_file()}
    assert len(models) >= 2 * 3  # per fold: a clean embedder, an adapted one and a DnCNN


@pytest.mark.slow  # dlib and MTCNN on 40 photos: ~15 s of CPU (the pooling itself: tests/unit/test_target_folds.py)
def test_the_pretrained_adversary_pools_its_folds_over_every_person(tmp_path):
    pytest.importorskip("dlib")
    from bench.data.base import ImageSet, Splits
    from tests.unit.test_recognizers import orl

    images, labels = orl()  # eight people of 5 photos: 2 the adversary's (train), 6 targets (test)
    own = torch.from_numpy(labels <= 2)
    people = Splits("orl", {"train": ImageSet(images[own], torch.from_numpy(labels[own.numpy()])),
                            "test": ImageSet(images[~own], torch.from_numpy(labels[~own.numpy()]))}, "orl-fixture")
    ctx = RunContext(device=torch.device("cpu"), seed=0, profile="smoke", data_root=None, cache_dir=tmp_path)
    attack = attacks.get("face_reid_pretrained")("smoke", {"enrol_per_id": 2, "folds": 2, "fold_below": 20})
    outcome = attack.run(people, Release(people, "identity", {}, 0, "identity"), ctx)
    m = outcome.metrics
    assert m["folds"] == 2 and m["identities"] == 8 and m["probes"] == outcome.trials == 8 * 3
    assert m["chance"] == pytest.approx(1 / 4) and m["top1"] == m["top1_clean"]
    assert sum(m[f"{method}_aligned_probes"] for method in ("mtcnn", "dlib_hog", "clean", "box")) == 24
    assert 0 < outcome.privacy_se() < 0.3 if outcome.privacy() is not None else outcome.privacy_se() is None
