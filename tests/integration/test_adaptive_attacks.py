"""Adaptive adversaries on the smoke profile: denoise, face_reid_adapted, attribute parts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from fixtures.reid_fixtures import write_fairface
from fixtures.smoke_cells import EMBEDDER_EPOCHS

from bench.cell.plan import RunConfig, plan
from bench.cli import main
from bench.core import scores
from bench.core.interfaces import AttackOutcome, RunContext
from bench.data.base import load_dataset
from bench.errors import BenchError
from bench.release.dataset import make_release

FEWSHOT_ATTACKS = {"face_reid", "face_reid_adapted", "denoise"}


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _bench_run(capsys, tmp_path: Path, cache: Path, *extra: str) -> dict:
    results = tmp_path / "results"
    code, out, err = _run(capsys, "run", "--task", "fewshot_synth_faces", "--profile", "smoke", "--device", "cpu",
                          "--results-dir", str(results), "--cache-dir", str(cache), "-q", *EMBEDDER_EPOCHS, *extra)
    assert code == 0, err
    line = next(line for line in out.splitlines() if line.startswith("logged: MLflow run "))
    code, raw, err = _run(capsys, "show", line.split()[3], "--json", "--results-dir", str(results))
    assert code == 0, err
    return json.loads(raw) | {"_printed": out}


def _outcomes(cache: Path, task: str, mechanism: str, params: dict, attacks: tuple[str, ...],
              data_root: Path | None = None, split: str = "test") -> dict[str, AttackOutcome]:
    """Runs only the attacks of a cell (no utility task) and returns their outcomes."""
    cell = plan(RunConfig(task=task, mechanism=mechanism, params=params, profile="smoke", device="cpu",
                          data_root=data_root, cache_dir=cache, attacks=attacks, split=split))
    ctx = RunContext(device=torch.device("cpu"), seed=0, profile="smoke", data_root=data_root, cache_dir=cache,
                     eval_split=split)
    clean = load_dataset(cell.task.dataset, data_root, cell.task.data_options(), cache)
    release = make_release(clean, cell.mechanism, ctx)
    return {name: attack.run(clean, release, ctx) for name, attack in cell.attacks.items()}


def test_fewshot_benchmarks_pair_the_adaptive_adversaries():
    from bench.core.registry import tasks

    assert set(tasks.get("fewshot_synth_faces").attacks) == FEWSHOT_ATTACKS
    pretrained = {"face_reid_pretrained", "face_reid_pretrained_adapted", "face_reid_pretrained_restored"}
    assert set(tasks.get("fewshot_celeba").attacks) == FEWSHOT_ATTACKS | pretrained  # real faces: pretrained too
    for name in ("reid_synth_persons", "reid_market1501"):
        assert tasks.get(name).attacks == ("identity_linkage", "attribute_inference", "denoise")


def test_blur_release_is_attacked_by_every_adversary_and_denoising_undoes_blur(capsys, tmp_path, shared_cache):
    data = _bench_run(capsys, tmp_path, shared_cache, "--mechanism", "blur", "--param", "radius=2")
    assert set(data["attacks"]) == FEWSHOT_ATTACKS
    assert "attack.denoise.top1" in data["_printed"] and "privacy.face_reid_adapted" in data["_printed"]
    reid, adapted, denoise = (data["attacks"][name] for name in ("face_reid", "face_reid_adapted", "denoise"))
    # All three attack the same probes; the clean reference is the same pipeline.
    assert reid["probes"] == adapted["probes"] == denoise["probes"] > 0
    assert reid["top1_clean"] == adapted["top1_clean"] == denoise["top1_clean"]
    assert denoise["top1_raw"] == reid["top1"] and adapted["top1_unadapted"] == reid["top1"]
    assert denoise["denoiser_trained"] == 1.0 and adapted["adapted"] == 1.0
    # The denoiser learned something about blur: closer to the clean images, no worse re-identification.
    assert denoise["psnr"] > denoise["psnr_raw"] + 1.0 and denoise["ssim"] > denoise["ssim_raw"]
    assert denoise["top1"] >= denoise["top1_raw"]
    defined = [score for score in data["privacy"].values() if score is not None]
    assert data["privacy_score"] == min(defined)
    utility = data["utility"]
    assert 0.0 <= utility["acc_denoiser"] <= 1.0 and utility["acc_denoiser_ci95"] > 0
    assert 0.0 < utility["ssim_denoiser"] <= 1.0 and 0.0 < utility["ssim_released"] < 1.0


def test_identity_release_gives_privacy_zero_for_every_adversary(capsys, tmp_path, shared_cache):
    data = _bench_run(capsys, tmp_path, shared_cache, "--mechanism", "identity")
    assert set(data["privacy"]) == FEWSHOT_ATTACKS
    assert data["privacy"] == {name: 0.0 for name in FEWSHOT_ATTACKS}, data["attacks"]
    assert data["attacks"]["denoise"]["denoiser_trained"] == 0.0
    assert data["attacks"]["face_reid_adapted"]["adapted"] == 0.0
    assert data["utility"]["acc_denoiser"] == data["utility"]["acc"] == data["utility"]["acc_baseline"]


def test_attribute_inference_reports_every_attribute_as_a_part(tmp_path):
    root = tmp_path / "data"
    write_fairface(root, n_train=24, n_val=12)
    outcomes = _outcomes(tmp_path / "cache", "attributes_fairface", "blur", {"radius": 2},
                         ("attribute_inference", "denoise"), data_root=root)
    for name, outcome in outcomes.items():
        assert list(outcome.parts) == ["gender", "age", "race"], name
        for attr, part in outcome.parts.items():
            assert part.trials == outcome.metrics[f"test_images_{attr}"] == 12
            assert part.chance == outcome.metrics[f"majority_{attr}"]
            assert part.clean == outcome.metrics[f"clean_acc_{attr}"]
        assert outcome.privacy() == scores.worst(part.privacy() for part in outcome.parts.values())
        assert set(outcome.flags()) == {a for a, p in outcome.parts.items() if p.privacy() is None}
    inference, denoise = outcomes["attribute_inference"], outcomes["denoise"]
    # Both use the same clean-trained classifiers; denoise tests them on raw and denoised releases.
    for attr in ("gender", "age", "race"):
        assert denoise.metrics[f"clean_acc_{attr}"] == inference.metrics[f"clean_acc_{attr}"]
        assert 0.0 <= denoise.metrics[f"acc_raw_{attr}"] <= 1.0
    assert denoise.metrics["denoiser_trained"] == 1.0 and 0.0 < denoise.metrics["ssim"] <= 1.0


def test_face_attacks_target_the_validation_identities_when_tuning(tmp_path, shared_cache):
    outcomes = _outcomes(shared_cache, "fewshot_synth_faces", "identity", {}, ("face_reid",), split="val")
    reid = outcomes["face_reid"]
    # smoke: 6 validation identities of 20 images, 13 enrolled each.
    assert reid.metrics["identities"] == 6 and reid.trials == reid.metrics["probes"] == 6 * 7
    assert reid.value == reid.clean


def test_fewshot_selects_on_held_out_training_identities_when_tuning(shared_cache):
    from bench.core.registry import tasks

    task = tasks.get("fewshot_synth_faces")("smoke")
    clean = load_dataset("synth_faces", None, task.data_options(), shared_cache)

    def ctx(split: str) -> RunContext:
        return RunContext(device=torch.device("cpu"), seed=0, profile="smoke", data_root=None,
                          cache_dir=shared_cache, eval_split=split)

    train, selection, key = task._fit_sets(clean, ctx("test"))
    assert train is clean["train"] and selection is clean["val"] and key == ()
    train, selection, key = task._fit_sets(clean, ctx("val"))
    ids = {name: set(s.labels.tolist()) for name, s in (("train", train), ("selection", selection))}
    assert not ids["train"] & ids["selection"] and not ids["selection"] & set(clean["val"].labels.tolist())
    assert ids["train"] | ids["selection"] == set(clean["train"].labels.tolist())
    assert len(ids["selection"]) == 6 == len(set(clean["val"].labels.tolist())) and key[-1] == 6
    assert len(train) + len(selection) == len(clean["train"])


def test_adversary_identities_must_not_overlap_the_targets(tmp_path, shared_cache):
    from attacks._reid_pipeline import FaceReidConfig, find_targets

    clean = load_dataset("synth_faces", None, {"n_ids": 40, "per_id": 20, "split_ids": [24, 6, 10], "variation": 2.0},
                         shared_cache)
    ctx = RunContext(device=torch.device("cpu"), seed=0, profile="smoke", data_root=None, cache_dir=shared_cache,
                     eval_split="train")
    with pytest.raises(BenchError, match="overlap the evaluated split"):
        find_targets(clean, FaceReidConfig(), ctx, "attack 'face_reid'")


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["--set", "denoise.depth=1"], "denoise' setting 'depth' must be in [2, inf)"),
        (["--set", "denoise.targets=faces"], "unknown target 'faces'"),
        (["--set", "face_reid_adapted.adapt_from=nowhere"], "must be one of clean, scratch"),
        (["--set", "face_reid.model=vgg"], "must be one of small_cnn, inception_resnet_v1"),
        (["--set", "task.denoiser_init=later"], "must be one of scratch, noisy"),
        (["--set", "face_reid_adapted.enrol_per_id=20"], "fewer than 2 identities of split 'test' have more than enrol_per_id=20"),
    ],
)
def test_adaptive_settings_are_checked_before_any_work(capsys, tmp_path, extra, fragment):
    code, _, err = _run(capsys, "run", "--task", "fewshot_synth_faces", "--mechanism", "blur", "--profile", "smoke",
                        "--results-dir", str(tmp_path / "r"), "-q", *extra)
    assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()
