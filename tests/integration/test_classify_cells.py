"""classify and transfer cells end to end (smoke): protocols, the shared original model, ImageNet streamed from disk."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import pytest
import yaml
from fixtures.imagenet_fixture import write_identities, write_imagenet

import bench.data.shards as shards
from bench.cli import main

ROOT = Path(__file__).resolve().parents[2]


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def cell(results: Path, cache: Path, task: str, mechanism: str, *extra: str) -> dict:
    code, out, log = run("run", "--task", task, "--mechanism", mechanism, "--profile", "smoke", "--device", "cpu",
                         "--results-dir", str(results), "--cache-dir", str(cache), *extra)
    assert code == 0, log
    run_id = next(line for line in out.splitlines() if line.startswith("logged: MLflow run ")).split()[3]
    code, raw, err = run("show", run_id, "--json", "--results-dir", str(results))
    assert code == 0, err
    return json.loads(raw) | {"_printed": out, "_err": log}


@pytest.fixture(scope="module")
def scenes(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("classify")
    cache = base / "cache"
    cells = {}
    for protocol, mechanism in (("obf_obf", "identity"), ("obf_obf", "face_blur"), ("orig_obf", "face_blur"),
                                ("obf_orig", "face_blur")):
        cells[protocol, mechanism] = cell(base / "results", cache, f"classify_synth_scenes_{protocol}", mechanism,
                                          "--attacks", "face_detect,face_reid", "-v")
    cells["transfer"] = cell(base / "results", cache, "transfer_synth_scenes_synth_scenes", "face_blur",
                             "--attacks", "face_detect", "-v")
    cells["results"] = base / "results"
    return cells


def test_identity_has_no_drop_and_top5_comes_first(scenes):
    utility = scenes["obf_obf", "identity"]["utility"]
    assert utility["top5_drop"] == 0.0 and utility["top1_drop"] == 0.0 and utility["map"] == utility["map_original"]
    assert utility["top5_drop_ci95"] == 0.0  # the same model on the same images: a paired interval of width 0
    blur = scenes["obf_obf", "face_blur"]["utility"]
    assert blur["top5_drop_ci95"] > 0 or blur["top5_drop"] == 0
    assert all(scenes[key]["primary_metric"] == "top5" for key in scenes if isinstance(key, tuple))


def test_protocols_share_models_as_the_paper_defines_them(scenes):
    blur = {p: scenes[p, "face_blur"]["utility"] for p in ("obf_obf", "orig_obf", "obf_orig")}
    original = scenes["obf_obf", "identity"]["utility"]
    for p in blur:  # one original model, on one original test split, for every protocol
        assert blur[p]["top5_original"] == original["top5"] and blur[p]["top1_original"] == original["top1"]
    # obf_orig tests the obf_obf model on original images; orig_obf the original model on released ones
    logs = {p: scenes[p, "face_blur"]["_err"] for p in blur}
    assert "training the released resnet18" in logs["obf_obf"]
    assert "training the released" not in logs["orig_obf"] and "training the released" not in logs["obf_orig"]
    assert "testing on the original test split" in logs["obf_orig"]
    assert "testing on the released test split" in logs["orig_obf"]


def test_face_adversaries_run_on_face_crops_and_detection_on_scenes(scenes):
    result = scenes["obf_obf", "face_blur"]
    assert result["attacks"]["face_reid"]["identities"] >= 2 and result["attacks"]["face_detect"]["faces"] > 0
    clean = result["attacks"]["face_detect"]["detect_rate_clean"]
    assert result["attacks"]["face_detect"]["detect_rate"] <= clean


def test_per_class_table_is_an_artifact_and_the_correlation_is_reported(scenes):
    tables = sorted(scenes["results"].rglob("per_class.csv"))
    assert len(tables) == 4
    header, *rows = tables[0].read_text().splitlines()
    assert header.split(",")[:4] == ["class", "images", "face_fraction", "top1"] and len(rows) == 10
    utility = scenes["obf_obf", "face_blur"]["utility"]
    assert utility["face_drop_classes"] == 10 and -1 <= utility["face_drop5_r"] <= 1 or math.isnan(utility["face_drop5_r"])


def test_transfer_compares_backbones_with_a_paired_interval(scenes):
    utility = scenes["transfer"]["utility"]
    assert utility["transfer_diff"] == pytest.approx(utility["transfer"] - utility["transfer_original"])
    assert utility["transfer_diff_lo"] <= utility["transfer_diff"] <= utility["transfer_diff_hi"]
    # the source backbones are classify's cached models
    assert utility["source_top1_original"] == pytest.approx(scenes["obf_obf", "identity"]["utility"]["top1"])
    assert scenes["transfer"]["_err"].count("reused cached model") >= 2
    # The target is recorded beside the source, so a cached result is checked against both.
    reads = scenes["transfer"]["data_reads"]
    assert [(r["dataset"], r["part"], r["synthetic"]) for r in reads] == [("synth_scenes", "splits", True)] * 2
    assert reads[0]["options"] != reads[1]["options"]
    assert reads[0]["fingerprint"] == scenes["transfer"]["dataset_fingerprint"]


def test_transfer_presets_train_the_classify_models(tmp_path):
    for source in ("synth_scenes", "imagenet"):
        classify = yaml.safe_load((ROOT / f"tasks/presets/classify_{source}.yaml").read_text())
        transfer = yaml.safe_load((ROOT / f"tasks/presets/transfer_{source}.yaml").read_text())
        for profile in ("defaults", "smoke", "quick", "paper"):
            for key in ("data", "arch", "weights", "input_size", "schedule", "processes", "backend"):
                assert classify[profile].get(key) == transfer[profile].get(key), (source, profile, key)


def test_imagenet_cell_streams_the_fixture_from_disk(tmp_path, monkeypatch):
    fixture = write_imagenet(tmp_path / "data")
    monkeypatch.setattr(shards, "MATERIALIZE_BYTES", 0)  # every split stays on disk, read batch by batch
    result = cell(tmp_path / "results", tmp_path / "cache", "classify_imagenet_obf_obf", "face_blur",
                  "--data-root", str(fixture.root))
    assert result["dataset"] == "imagenet" and 0.0 <= result["utility"]["top5"] <= 1.0
    assert list(result["attacks"]) == ["face_detect"]  # no identities: the face-crop adversaries are skipped
    pretrained = {"face_reid_pretrained", "face_reid_pretrained_adapted", "face_reid_pretrained_restored"}
    assert set(result["skipped_attacks"]) == {"face_reid", "face_reid_adapted", "denoise", *pretrained}
    assert "task.data.face_identities" in result["skipped_attacks"]["face_reid"]
    assert "skipped face_reid, face_reid_adapted, denoise" in result["_err"]
    assert "attack.face_reid" in result["_printed"] and "skipped" in result["_printed"]


def test_imagenet_cell_runs_face_reid_on_crops_when_identities_are_given(tmp_path):
    fixture = write_imagenet(tmp_path / "data")
    names = [n for w in fixture.train for n in fixture.train[w] + fixture.val[w]]
    entries, rows = [], []
    for n, name in enumerate(names):  # three faces inside every image's centre square, six people
        w, h = fixture.size[name]
        side = min(w, h)
        x0, y0 = (w - side) / 2, (h - side) / 2
        boxes = [(0.1, 0.1), (0.6, 0.1), (0.35, 0.6)]
        entries.append({"url": fixture.url(name), "bboxes": [
            {"x0": x0 + a * side, "y0": y0 + b * side, "x1": x0 + (a + 0.25) * side, "y1": y0 + (b + 0.25) * side}
            for a, b in boxes]})
        rows += [(name, k, f"person{(3 * n + k) % 6}") for k in range(len(boxes))]
    (fixture.base / "face_annotations_ILSVRC.json").write_text(json.dumps(entries))
    write_identities(fixture, fixture.base / "people.csv", rows)
    result = cell(tmp_path / "results", tmp_path / "cache", "classify_imagenet_obf_obf", "face_blur",
                  "--data-root", str(fixture.root), "--attacks", "face_reid",
                  "--set", "task.data.face_identities=people.csv", "-v")
    assert result["skipped_attacks"] == {} and "skipped" not in result["_err"]
    assert result["attacks"]["face_reid"]["identities"] == 2  # six people: 3 the adversary's, 1 val, 2 targets
    assert "cropping the faces of imagenet" in result["_err"]


@pytest.mark.slow
def test_the_paper_suite_validates_on_the_fixture(tmp_path):
    fixture = write_imagenet(tmp_path / "data")
    code, out, err = run("grid", "--suite", "imagenet_paper", "--dry-run", "--data-root", str(fixture.root),
                         "--results-dir", str(tmp_path / "r"), "--cache-dir", str(tmp_path / "c"))
    assert code == 0, err
    assert "grid: 405 cells" in out  # 15 architectures x 3 mechanisms x 3 protocols x 3 seeds
    assert "[arch=vgg16, schedule.lr=0.01]" in out


def test_imagenet_weights_that_saw_faces_are_refused_before_any_work(tmp_path):
    weights = tmp_path / "w.pt"
    weights.write_bytes(b"")
    code, _, err = run("run", "--task", "transfer_imagenet_cifar10", "--mechanism", "face_blur", "--profile", "smoke",
                       "--set", f"task.weights={weights}", "--results-dir", str(tmp_path / "r"))
    assert code == 2 and "refused" in err.strip().splitlines()[-1]


def test_gpus_per_cell_needs_the_ray_executor(tmp_path):
    code, _, err = run("grid", "--suite", "imagenet_quick", "--dry-run", "--gpus-per-cell", "4",
                       "--results-dir", str(tmp_path / "r"))
    assert code == 2 and "needs --executor ray" in err.strip().splitlines()[-1]
