"""Face adversaries on small data: every identity is a target once, the adversary never trains on its targets."""

from __future__ import annotations

import torch

from attacks._reid_pipeline import FaceReidConfig
from attacks._targets import find_folds, folding, pooled_targets
from bench.core.interfaces import RunContext
from bench.data.base import ImageSet, Splits


def people(split_ids: dict[str, range], per_id: int = 6, few: int = 0) -> Splits:
    """Returns tiny splits of disjoint identities (``few`` of train's have only 2 images)."""
    sets = {}
    for name, ids in split_ids.items():
        labels = [i for i in ids for _ in range(2 if name == "train" and i - ids.start < few else per_id)]
        sets[name] = ImageSet(images=torch.zeros(len(labels), 3, 4, 4, dtype=torch.uint8),
                              labels=torch.tensor(labels), attrs={"gender": torch.tensor(labels) % 2})
    return Splits("people", sets, "fp")


def ctx(split: str = "test", seed: int = 0) -> RunContext:
    return RunContext(device=torch.device("cpu"), seed=seed, profile="quick", data_root=None, cache_dir=None,
                      eval_split=split)


SMALL = {"train": range(0, 24), "val": range(24, 32), "test": range(32, 40)}
"""A folder of 40 people: 8 test people, as the issue's user met."""


def test_few_targets_fold_over_every_identity_and_each_fold_trains_on_others():
    clean = people(SMALL, few=2)
    cfg = FaceReidConfig(enrol_per_id=3, folds=4, fold_below=20)
    folds = find_folds(clean, cfg, ctx(), "attack 'face_reid'")
    assert len(folds) == 4 and [f.index for f in folds] == [0, 1, 2, 3]
    targeted = [set(f.targets.probe_labels().tolist()) for f in folds]
    assert sum(len(t) for t in targeted) == len(set().union(*targeted)) == 38  # each once; 2 have too few images
    for fold, ids in zip(folds, targeted):
        assert not ids & set(fold.own.labels.tolist())  # the embedder never sees its targets
        assert set(fold.targets.images.labels[fold.targets.enrol].tolist()) == ids
        assert {0, 1} <= set(fold.own.labels.tolist())  # identities too small to target still train
    pooled = pooled_targets(folds)
    assert pooled.counts() == {"identities": 38.0, "probes": 38.0 * 3, "folds": 4.0}
    assert pooled.chance == sum(len(f.targets.probe) / f.targets.identities for f in folds) / (38 * 3)
    assert pooled.groups(torch.ones(114).bool().numpy(), torch.ones(114).bool().numpy()) != {}
    assert len({f.key for f in folds}) == 4 and all(f.suffix for f in folds)


def test_folds_are_a_function_of_the_seed():
    clean, cfg = people(SMALL), FaceReidConfig(enrol_per_id=3, folds=4)
    first = [f.targets.probe.tolist() for f in find_folds(clean, cfg, ctx(), "x")]
    assert first == [f.targets.probe.tolist() for f in find_folds(clean, cfg, ctx(), "x")]
    assert first != [f.targets.probe.tolist() for f in find_folds(clean, cfg, ctx(seed=1), "x")]


def test_tuning_on_val_never_targets_or_trains_on_test_people():
    clean = people(SMALL)
    folds = find_folds(clean, FaceReidConfig(enrol_per_id=3, folds=4), ctx("val"), "x")
    assert len(folds) == 4
    for fold in folds:
        seen = set(fold.own.labels.tolist()) | set(fold.targets.images.labels.tolist())
        assert not seen & set(SMALL["test"])


def test_enough_targets_one_fold_or_a_user_cap_keep_the_evaluated_split():
    clean = people(SMALL)
    for cfg in (FaceReidConfig(enrol_per_id=3, folds=1), FaceReidConfig(enrol_per_id=3, folds=4, fold_below=8),
                FaceReidConfig(enrol_per_id=3, folds=4, max_ids=4)):
        (fold,) = find_folds(clean, cfg, ctx(), "x")
        assert fold.key == "" and fold.suffix == "" and fold.targets.split == "test"
        assert fold.own is clean["train"]
        assert fold.targets.identities == (4 if cfg.max_ids else 8)
    assert folding(8, FaceReidConfig(folds=4, fold_below=20))
    assert not folding(20, FaceReidConfig(folds=4, fold_below=20))
    assert not folding(8, FaceReidConfig(folds=4, max_ids=5)) and folding(8, FaceReidConfig(folds=4, max_ids=8))


def test_the_pretrained_outcome_pools_hits_and_weighs_other_metrics_by_probes():
    import numpy as np

    from attacks._pretrained_pipeline import Identified
    from attacks.face_reid_pretrained import FaceReidPretrained

    folds = find_folds(people(SMALL), FaceReidConfig(enrol_per_id=3, folds=2), ctx(), "x")
    sizes = [len(f.targets.probe) for f in folds]
    results = []
    for k, size in enumerate(sizes):
        hits = np.arange(size) % (k + 2) == 0
        results.append({"attacked": Identified(hits, {"top1": float(hits.mean()), "tar_far1e-2": 0.1 * (k + 1)}),
                        "baseline": Identified(np.ones(size, bool), {"top1_clean": 1.0, "tar_far1e-2_clean": 0.9}),
                        "counts": {"probes_aligned_detected": float(size - 1), "probes_aligned_centred": 1.0}})
    outcome = FaceReidPretrained("smoke", {"folds": 2}).outcome(folds, results)
    m = outcome.metrics
    every = np.concatenate([r["attacked"].hits for r in results])
    assert m["top1"] == outcome.value == float(every.mean()) and m["top1_clean"] == 1.0
    assert m["tar_far1e-2"] == np.average([0.1, 0.2], weights=sizes) and m["tar_far1e-2_clean"] == 0.9
    assert m["probes_aligned_centred"] == 2 and m["probes"] == outcome.trials == sum(sizes) and m["folds"] == 2
    assert m["chance"] == outcome.chance == pooled_targets(folds).chance
