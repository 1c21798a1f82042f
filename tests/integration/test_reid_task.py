"""The reID benchmarks end to end through ``bench run`` on the smoke profile."""

from __future__ import annotations

import json

import pytest
from fixtures.reid_fixtures import write_fairface, write_market1501, write_market_people

from bench.cli import main
from bench.core import scores

REID_METRICS = [f"{m}_{kind}" for kind in ("regular", "centroid") for m in ("map", "rank1", "rank5", "rank10")]


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _result(capsys, out: str, results) -> dict:
    line = next(line for line in out.splitlines() if line.startswith("logged: MLflow run "))
    code, raw, err = _run(capsys, "show", line.split()[3], "--json", "--results-dir", str(results))
    assert code == 0, err
    return json.loads(raw)


def _bench_run(capsys, tmp_path, cache, task: str, mechanism: str, *extra: str) -> dict:
    results = tmp_path / "results"
    code, out, err = _run(capsys, "run", "--task", task, "--mechanism", mechanism, "--profile", "smoke",
                          "--device", "cpu", "--results-dir", str(results), "--cache-dir", str(cache), "-q", *extra)
    assert code == 0, err
    return _result(capsys, out, results) | {"_printed": out}


def test_reid_synth_persons_runs_both_models_and_the_gender_adversary(capsys, tmp_path, shared_cache):
    data = _bench_run(capsys, tmp_path, shared_cache, "reid_synth_persons", "image_dp",
                      "--param", "epsilon=1000000", "--param", "block=2", "--param", "colours=32")
    assert "utility.map_centroid *" in data["_printed"]
    assert data["primary_metric"] == "map_centroid"
    utility = data["utility"]
    for name in REID_METRICS + ["map_regular_on_centroids", "map_centroid_on_images", "chance_map_images"]:
        assert 0.0 <= utility[name] <= 1.0, name
    for kind in ("regular", "centroid"):
        assert utility[f"rank1_{kind}"] <= utility[f"rank5_{kind}"] <= utility[f"rank10_{kind}"]
    attack = data["attacks"]["attribute_inference"]
    assert {"acc_gender", "clean_acc_gender", "majority_gender", "acc", "acc_clean", "chance"} <= set(attack)
    assert attack["acc"] == attack["acc_gender"] and attack["chance"] == attack["majority_gender"]
    assert 0.5 <= attack["majority_gender"] <= 1.0
    _check_score(data, "attribute_inference", "gender", attack["acc_gender"])
    denoise = data["attacks"]["denoise"]
    assert set(data["attacks"]) == {"identity_linkage", "attribute_inference", "denoise"}
    _check_linkage(data)
    assert denoise["clean_acc_gender"] == attack["clean_acc_gender"] and 0.0 <= denoise["acc_raw_gender"] <= 1.0
    assert denoise["denoiser_trained"] == 1.0 and 0.0 < denoise["ssim"] <= 1.0
    _check_score(data, "denoise", "", denoise["acc_gender"])
    assert data["claim"]["unit"] == "any image of this size"


def _check_score(data: dict, attack: str, part: str, value: float) -> None:
    """The privacy score of a gender attack: defined iff its clean advantage is significant."""
    metrics = data["attacks"][attack]
    clean, chance, trials = metrics["clean_acc_gender"], metrics["majority_gender"], int(metrics["test_images_gender"])
    score = data["privacy"][attack]
    if scores.is_significant(clean, chance, trials):
        assert score == pytest.approx(1 - min(max((value - chance) / (clean - chance), 0.0), 1.0))
    else:
        assert score is None and data["privacy_flags"][f"{attack}.{part}" if part else attack] == scores.TOO_WEAK


def _check_linkage(data: dict) -> None:
    """The identity-linkage adversary: top-1 against the exact chance of a random ranking, scored iff significant."""
    link = data["attacks"]["identity_linkage"]
    assert 0.0 < link["chance"] < 1.0 and 0.0 < link["chance_map"] < 1.0 and link["queries"] > 0
    for name in ("top1", "top1_clean", "map", "map_clean"):
        assert 0.0 <= link[name] <= 1.0, name
    score = data["privacy"]["identity_linkage"]
    if scores.is_significant(link["top1_clean"], link["chance"], int(link["queries"])):
        expected = 1 - min(max((link["top1"] - link["chance"]) / (link["top1_clean"] - link["chance"]), 0.0), 1.0)
        assert score == pytest.approx(expected)
    else:
        assert score is None and data["privacy_flags"]["identity_linkage"] == scores.TOO_WEAK


def test_identity_release_reuses_the_clean_models_and_repeats_exactly(capsys, tmp_path, shared_cache):
    first = _bench_run(capsys, tmp_path / "a", shared_cache, "reid_synth_persons", "identity")
    again = _bench_run(capsys, tmp_path / "b", shared_cache, "reid_synth_persons", "identity")
    assert first["utility"] == again["utility"] and first["attacks"] == again["attacks"]
    attack = first["attacks"]["attribute_inference"]
    assert attack["acc_gender"] == attack["clean_acc_gender"]
    _check_score(first, "attribute_inference", "gender", attack["acc_gender"])
    assert first["attacks"]["denoise"]["denoiser_trained"] == 0.0
    assert first["attacks"]["denoise"]["acc_gender"] == attack["clean_acc_gender"]
    link = first["attacks"]["identity_linkage"]
    assert link["top1"] == link["top1_clean"] and link["map"] == link["map_clean"]


def test_reid_market1501_reads_the_official_layout(capsys, tmp_path):
    root = tmp_path / "data"
    write_market1501(root, cams=2)
    data = _bench_run(capsys, tmp_path, tmp_path / "cache", "reid_market1501", "identity", "--data-root", str(root),
                      "--set", "task.p=2", "--set", "task.k=2", "--set", "identity_linkage.p=2")
    assert data["dataset"] == "market1501" and not data["synthetic"]
    assert 0.0 <= data["utility"]["map_centroid"] <= 1.0
    assert data["attacks"]["attribute_inference"]["test_images_gender"] > 0
    assert data["attacks"]["identity_linkage"]["queries"] > 0


def test_pedestrians_without_attribute_labels_keep_a_privacy_axis(capsys, tmp_path):
    root = tmp_path / "data"
    write_market_people(root, n_train=12, n_test=12, cams=2, per_cam=3)  # no attribute file
    code, _, err = _run(capsys, "run", "--task", "reid_market1501", "--mechanism", "blur", "--param", "radius=2",
                        "--profile", "smoke", "--data-root", str(root), "--results-dir", str(tmp_path / "r0"), "-q",
                        "--attacks", "attribute_inference,identity_linkage")
    assert code == 2 and "--attacks identity_linkage" in err  # an adversary the user names is never left out
    assert not (tmp_path / "r0").exists()
    results = tmp_path / "results"
    code, out, err = _run(capsys, "run", "--task", "reid_market1501", "--mechanism", "blur", "--param", "radius=2",
                          "--profile", "smoke", "--device", "cpu", "--data-root", str(root), "--results-dir",
                          str(results), "--cache-dir", str(tmp_path / "cache"), "-q")
    assert code == 0 and "left out attribute_inference, denoise: the market1501 data does not label" in err, err
    data = _result(capsys, out, results)  # the defaults, less the adversaries with nothing to infer
    assert set(data["attacks"]) == {"identity_linkage"}
    link = data["attacks"]["identity_linkage"]
    assert scores.is_significant(link["top1_clean"], link["chance"], int(link["queries"]))  # flat outfits link easily
    assert data["privacy"]["identity_linkage"] is not None and data["privacy_score"] is not None
    _check_linkage(data)


def test_attributes_fairface_reports_fidelity_and_three_attributes(capsys, tmp_path):
    root = tmp_path / "data"
    write_fairface(root, n_train=24, n_val=12)
    cache = tmp_path / "cache"
    clean = _bench_run(capsys, tmp_path / "a", cache, "attributes_fairface", "identity", "--data-root", str(root))
    assert clean["utility"]["ssim"] == pytest.approx(1.0) and clean["primary_metric"] == "ssim"
    noisy = _bench_run(capsys, tmp_path / "b", cache, "attributes_fairface", "image_dp", "--data-root", str(root),
                       "--param", "epsilon=1", "--param", "block=4", "--param", "colours=32")
    assert noisy["utility"]["ssim"] < 0.9
    attack = noisy["attacks"]["attribute_inference"]
    for attr in ("gender", "age", "race"):
        assert 0.0 <= attack[f"acc_{attr}"] <= 1.0 and 0.0 < attack[f"majority_{attr}"] <= 1.0
    assert attack["acc"] == attack["acc_gender"]
    for attr in ("gender", "age", "race"):  # every attribute is scored (or flagged) on its own
        weak = not scores.is_significant(attack[f"clean_acc_{attr}"], attack[f"majority_{attr}"],
                                         int(attack[f"test_images_{attr}"]))
        assert (f"attribute_inference.{attr}" in noisy["privacy_flags"]) == weak


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["--set", "task.arch=resnet7"], "setting 'arch' must be one of resnet18"),
        (["--set", "task.p=1"], "setting 'p' must be in [2, inf)"),
        (["--set", "attribute_inference.arch=vgg"], "unknown arch"),
        (["--set", "task.epochz=1"], "did you mean 'epochs'"),
        (["--set", "task.weights=/nonexistent/resnet50.pth"], "never downloaded"),
        (["--set", "attribute_inference.weights=/nonexistent/resnet50.pth"], "never downloaded"),
    ],
)
def test_reid_configuration_errors_are_one_line_exit_2(capsys, tmp_path, extra, fragment):
    code, out, err = _run(capsys, "run", "--task", "reid_synth_persons", "--mechanism", "identity", "--profile",
                          "smoke", "--results-dir", str(tmp_path / "r"), "-q", *extra)
    assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()
