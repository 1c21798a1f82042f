"""Classification under the face-obfuscation protocols: metrics, protocols as benchmarks, weights, crops, training."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attacks._targets import concat_sets
from bench.core.interfaces import Release, RunContext
from bench.core.registry import benchmarks, mechanisms, tasks
from bench.data.base import ImageSet, Splits
from bench.errors import BenchError
from bench.nn.classifiers import Classifier, check_input, load_weights
from bench.nn.stream_train import augment_batch
from bench.release.dataset import apply_to_split
from bench.release.facecrops import FaceCrops, crop_faces, face_crop_view, has_face_table
from tasks.class_metrics import correlation, per_class_accuracy, per_class_ap, topk_accuracy
from tasks.classify import PROTOCOLS, class_face_fraction


def test_per_class_ap_matches_scikit_learn():
    from sklearn.metrics import average_precision_score

    g = torch.Generator().manual_seed(0)
    scores = torch.rand(200, 7, generator=g)
    labels = torch.randint(0, 7, (200,), generator=g)
    ap = per_class_ap(scores, labels, 7)
    for c in range(7):
        assert ap[c].item() == pytest.approx(average_precision_score((labels == c).numpy(), scores[:, c].numpy()))
    multi = (torch.rand(200, 5, generator=g) < 0.3).long()
    ap = per_class_ap(scores[:, :5], multi)
    for c in range(5):
        assert ap[c].item() == pytest.approx(average_precision_score(multi[:, c].numpy(), scores[:, c].numpy()))


def test_per_class_ap_is_nan_without_positives_and_one_when_perfect():
    labels = torch.tensor([0, 0, 1, 1])
    scores = torch.tensor([[0.9, 0.1, 0.0], [0.8, 0.2, 0.0], [0.1, 0.9, 0.0], [0.2, 0.7, 0.0]])
    ap = per_class_ap(scores, labels, 3)
    assert ap[:2].tolist() == [1.0, 1.0] and math.isnan(ap[2].item())


def test_per_class_accuracy_and_topk():
    scores = torch.tensor([[3.0, 2, 1], [3, 2, 1], [1, 3, 2], [1, 2, 3]])
    labels = torch.tensor([0, 1, 1, 1])
    acc = per_class_accuracy(scores, labels, 3)
    assert acc[0].item() == 1.0 and acc[1].item() == pytest.approx(1 / 3) and math.isnan(acc[2].item())
    assert per_class_accuracy(scores, labels, 3, k=2)[1].item() == 1.0
    assert topk_accuracy(scores, labels, k=2) == (0.5, 1.0)


def test_correlation_drops_undefined_pairs_and_needs_three():
    r = correlation([0.0, 0.1, 0.5, math.nan, 0.9], [0.0, 0.02, 0.1, 5.0, 0.2])
    assert r["n"] == 4 and r["r"] == pytest.approx(np.corrcoef([0, 0.1, 0.5, 0.9], [0, 0.02, 0.1, 0.2])[0, 1])
    assert 0 <= r["p"] < 0.1
    assert math.isnan(correlation([1.0, 2.0], [1.0, 3.0])["r"])
    assert math.isnan(correlation([1.0, 1.0, 1.0], [1.0, 2.0, 3.0])["r"])


def test_class_face_fraction_averages_defined_images_per_class():
    labels = torch.tensor([0, 0, 1, 1, 2])
    split = ImageSet(torch.zeros(5, 3, 4, 4, dtype=torch.uint8), labels)
    clean = Splits("d", {"test": split}, "f", info={"object_face_fraction": {"test": torch.tensor(
        [0.2, 0.4, math.nan, 0.5, math.nan])}})
    got = class_face_fraction(clean, "test", 3)
    assert got[0].item() == pytest.approx(0.3) and got[1].item() == 0.5 and math.isnan(got[2].item())
    assert torch.isnan(class_face_fraction(Splits("d", {"test": split}, "f"), "test", 3)).all()


def test_each_protocol_is_its_own_benchmark_and_cannot_be_overridden():
    for dataset in ("synth_scenes", "imagenet"):
        for protocol in PROTOCOLS:
            declared = benchmarks.get(f"classify_{dataset}_{protocol}")
            assert declared.task_settings == {"protocol": protocol}
            task = tasks.get(declared.name)("smoke")
            assert task.config.protocol == protocol and task.primary == "top5"
    with pytest.raises(BenchError, match="fixed to 'obf_obf' by the benchmark"):
        tasks.get("classify_synth_scenes_obf_obf")("smoke", {"protocol": "orig_obf"})
    assert tasks.get("classify_synth_scenes_obf_obf")("smoke", {"protocol": "obf_obf"}).config.protocol == "obf_obf"


def test_weights_that_saw_faces_are_refused_for_obfuscated_training(tmp_path):
    weights = tmp_path / "resnet18.pt"
    torch.save(Classifier("resnet18", 10).net.state_dict(), weights)
    for protocol in ("obf_obf", "obf_orig"):
        with pytest.raises(BenchError, match="refused") as exc:
            tasks.get(f"classify_synth_scenes_{protocol}")("smoke", {"weights": str(weights)})
        assert "\n" not in str(exc.value)
        tasks.get(f"classify_synth_scenes_{protocol}")("smoke", {"weights": str(weights), "weights_saw_faces": False})
    tasks.get("classify_synth_scenes_orig_obf")("smoke", {"weights": str(weights)})


def test_local_weights_load_with_a_fresh_head_and_mismatches_fail(tmp_path):
    torch.manual_seed(0)
    source = Classifier("resnet18", 1000)
    path = tmp_path / "w.pt"
    torch.save({f"module.{k}": v for k, v in source.net.state_dict().items()}, path)
    target = Classifier("resnet18", 10, str(path))
    assert torch.equal(target.net.conv1.weight, source.net.conv1.weight) and target.net.fc.out_features == 10
    torch.save(Classifier("resnet34", 10).net.state_dict(), path)
    with pytest.raises(BenchError, match="do not fit"):
        load_weights(Classifier("resnet18", 10).net, str(path))


def test_unknown_architecture_and_too_small_inputs_are_one_line_errors():
    with pytest.raises(BenchError, match="did you mean 'resnet18'"):
        Classifier("resnet81", 3)
    with pytest.raises(BenchError, match="cannot classify 16 x 16") as exc:
        check_input("alexnet", 16, "task 't'")
    assert "\n" not in str(exc.value)
    check_input("resnet18", 32, "task 't'")


def test_head_replacement_keeps_the_backbone():
    model = Classifier("mobilenet_v2", 5)
    before = model.net.features[0][0].weight.clone()
    model.replace_head(3)
    assert model.head().out_features == 3 and torch.equal(model.net.features[0][0].weight, before)
    assert model(torch.zeros(2, 3, 32, 32)).shape == (2, 3)


@pytest.mark.parametrize("kind", ["random_resized_crop", "pad_crop", "flip", "none"])
def test_augment_batch_is_seeded_and_sized(kind):
    x = torch.rand(6, 3, 40, 40) * 2 - 1
    a = augment_batch(x, kind, 32, torch.Generator().manual_seed(1))
    b = augment_batch(x, kind, 32, torch.Generator().manual_seed(1))
    assert a.shape == (6, 3, 32, 32) and torch.equal(a, b)
    assert a.min() >= -1.0001 and a.max() <= 1.0001


def test_random_resized_crop_of_the_whole_image_is_the_image():
    x = torch.rand(1, 3, 16, 16)
    grid_full = augment_batch(x, "none", 16, torch.Generator().manual_seed(0))
    assert torch.equal(grid_full, x)


def _scene(n_images: int = 4) -> tuple[Splits, Release]:
    """Scenes of flat grey with one face each: a square of a colour per identity at a known box."""
    images = torch.full((n_images, 3, 64, 64), 100, dtype=torch.uint8)
    boxes = []
    for i in range(n_images):
        x, y, c = 8 + 4 * (i % 8), 10 + 2 * (i % 8), 40 * (i % 6)
        images[i, :, y : y + 20, x : x + 20] = torch.tensor([c, 200, 250 - c], dtype=torch.uint8)[:, None, None]
        boxes.append(torch.tensor([[x, y, x + 20.0, y + 20.0]]))
    ids = torch.arange(n_images) % 4
    table = {"image": torch.arange(n_images), "identity": ids, "gender": ids % 2, "age_group": ids % 3,
             "skin_tone": ids % 2, "box": torch.cat(boxes)}
    names = {"gender": ["f", "m"], "age_group": ["y", "m", "o"], "skin_tone": ["l", "d"]}
    split = ImageSet(images, torch.zeros(n_images, dtype=torch.long), attr_names=names, boxes=boxes)
    clean = Splits("scenes", {"train": split}, "fp", synthetic=True, info={"faces": {"train": table}})
    released = Release(clean.replace_images({"train": 255 - images}), "m", {}, 0, "rk")
    return clean, released


def test_face_crops_centre_the_face_and_map_its_box():
    clean, _ = _scene()
    table = clean.info["faces"]["train"]
    crops, inner = crop_faces(clean["train"].images, table["image"], table["box"], 26)
    assert crops.shape == (4, 3, 26, 26)
    for i in range(4):
        x1, y1, x2, y2 = inner[i].round().long().tolist()
        assert (x1, y1, x2, y2) == (3, 3, 23, 23)  # a 20 px face in a 26 px (1.3 x) crop
        assert crops[i, :, 13, 13].tolist() == clean["train"].images[i, :, 20 + 2 * i, 18 + 4 * i].tolist()
        assert crops[i, :, 1, 1].tolist() == [100, 100, 100]


def test_face_crop_view_splits_people_and_cuts_released_faces_at_the_same_place():
    clean, released = _scene(40)
    assert has_face_table(clean)
    view, release = face_crop_view(clean, released, seed=3, size=26)
    people = {s: set(view[s].labels.tolist()) for s in ("train", "val", "test")}
    assert not (people["train"] & people["test"]) and not (people["val"] & people["test"])
    assert sum(len(view[s]) for s in view.sets) == 40
    for s in view.sets:
        assert torch.equal(release.splits[s].images, 255 - view[s].images)
        assert torch.equal(release.splits[s].labels, view[s].labels)
        assert set(view[s].attrs) == {"gender", "age_group", "skin_tone"}
    assert release.key != released.key and view.fingerprint != clean.fingerprint
    again, _ = face_crop_view(clean, released, seed=3, size=26)
    assert all(torch.equal(again[s].images, view[s].images) for s in view.sets)
    with pytest.raises(BenchError, match="no face table"):
        face_crop_view(Splits("x", {"train": clean["train"]}, "f"), released, 0)


@pytest.mark.parametrize("name, params", [("pixelate", {"block": 16}), ("blur", {"radius": 6.0}), ("face_blur", {})])
def test_an_adversary_releasing_its_own_crops_gets_what_the_release_made_of_those_faces(tmp_path, name, params):
    """The mechanism runs over the crops' scenes (their size, their face boxes), then the crops are cut."""
    clean, _ = _scene(12)
    ctx = RunContext(device=torch.device("cpu"), seed=0, profile="smoke", data_root=None, cache_dir=tmp_path)
    mechanism = mechanisms.get(name)(**params)
    scenes, _ = apply_to_split(mechanism, clean["train"], ctx, "release/train")
    released = Release(clean.replace_images({"train": scenes}), name, params, 0, "rk")
    view, release = face_crop_view(clean, released, seed=3, size=26)
    for s in view.sets:
        own = view[s].subset(torch.arange(len(view[s])).flip(0))
        assert isinstance(own, FaceCrops) and len(own.origin.split) == len(own)
        again, _ = apply_to_split(mechanism, own, ctx, "release/train")
        assert torch.equal(again, release.splits[s].images.flip(0))
        direct, _ = _apply_without_origin(mechanism, own, ctx)
        assert not torch.equal(direct, again)  # over the crops themselves it makes other images
    identity, _ = apply_to_split(mechanisms.get("identity")(), view["train"], ctx, "adversary")
    assert torch.equal(identity, view["train"].images)
    pooled = concat_sets([view["train"], view["test"]])  # folds pool the splits: the crops keep their scenes
    again, _ = apply_to_split(mechanism, pooled, ctx, "adversary")
    assert torch.equal(again, torch.cat([release.splits["train"].images, release.splits["test"].images]))


def _apply_without_origin(mechanism, crops, ctx):
    plain = ImageSet(crops.images, crops.labels, crops.attrs, crops.attr_names, crops.boxes)
    return apply_to_split(mechanism, plain, ctx, "release/train")


def test_paired_intervals_cover_the_difference_and_shrink_with_agreement():
    from tasks.class_metrics import bootstrap_interval, bootstrap_mean_interval, topk_hits

    g = torch.Generator().manual_seed(0)
    deltas = (torch.rand(1000, generator=g) < 0.3).double() - (torch.rand(1000, generator=g) < 0.2).double()
    lo, hi = bootstrap_mean_interval(deltas, torch.Generator().manual_seed(1))
    assert lo < deltas.mean().item() < hi and 0.0 < lo  # a 10-point gap over 1,000 images is significant
    assert bootstrap_mean_interval(torch.zeros(50), torch.Generator().manual_seed(1)) == (0.0, 0.0)
    assert bootstrap_mean_interval(deltas, torch.Generator().manual_seed(1)) == (lo, hi)
    values = torch.arange(10.0)
    lo, hi = bootstrap_interval(lambda index: values[index].mean().item(), 10, torch.Generator().manual_seed(2))
    assert lo < 4.5 < hi
    scores = torch.tensor([[0.1, 0.9, 0.0], [0.8, 0.05, 0.15]])
    assert topk_hits(scores, torch.tensor([1, 2]), 1).tolist() == [1.0, 0.0]
    assert topk_hits(scores, torch.tensor([1, 2]), 2).tolist() == [1.0, 1.0]
