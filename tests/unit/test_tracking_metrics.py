"""What a run's MLflow metrics hold (the numbers compared across runs) and what goes to its tables."""

from __future__ import annotations

import dataclasses

from bench.core.interfaces import Result
from bench.storage.tracking import run_name, run_params
from bench.storage.tracking.metrics import attack_primary, result_metrics
from bench.storage.tracking.tables import attack_rows, group_rows

GROUPS = {
    "utility": {"metric": "acc", "gaps": {"gender": {"gap": 0.1}}, "note": "",
                "table": {"gender": {"female": {"n": 40, "acc": 0.5, "acc_ci95": 0.1, "acc_clean": 0.7},
                                     "male": {"n": 40, "acc": 0.6, "acc_ci95": 0.1, "acc_clean": 0.8}}}},
    "attacks": {"face_reid": {"metric": "top1", "gaps": {},
                              "table": {"gender": {"female": {"n": 30, "top1": 0.2, "clean": 0.6, "chance": 0.1,
                                                              "privacy": 0.8},
                                                   "male": {"n": 10, "flag": "group too small"}}}}},
    "worst_privacy": {"privacy": 0.8, "group": "gender=female", "attack": "face_reid"},
}


def _result() -> Result:
    return Result(
        cell_key="k", task="fewshot_synth_faces", dataset="synth_faces", mechanism="dp_pix", mechanism_version=1,
        params={"epsilon": 3.0, "block": 4}, seed=0, profile="smoke", utility={"acc": 0.5, "acc_ci95": 0.01},
        primary_metric="acc", privacy={"face_reid": 0.8, "denoise": None},
        attacks={"face_reid": {"top1": 0.2, "top1_clean": 0.6, "chance": 0.1, "identities": 10, "probes": 70},
                 "denoise": {"top1": 0.3, "top1_clean": 0.6, "psnr": 20.0, "denoiser_trained": 1.0},
                 "gone": {"x": 1.0, "x_clean": 2.0, "n": 5}},
        privacy_score=0.8, claim=None, runtime_s=3.0, versions={}, git_sha="abc", dataset_fingerprint="fp",
        synthetic=True, device="cpu", created="2026-01-01T00:00:00+00:00", groups=GROUPS,
        stage_seconds={"data": 1.0, "task": 2.0}, release_metrics={"psnr": 30.0},
    )


def test_metrics_are_the_numbers_compared_across_runs():
    assert result_metrics(_result()) == {
        "utility.acc": 0.5, "utility.acc_ci95": 0.01,
        "attack.face_reid.top1": 0.2, "attack.face_reid.top1_clean": 0.6,
        "attack.denoise.top1": 0.3, "attack.denoise.top1_clean": 0.6,
        "attack.gone.x": 1.0, "attack.gone.x_clean": 2.0,  # an attack no longer registered: its primary pair
        "privacy.face_reid": 0.8, "privacy_score": 0.8, "group.worst_privacy": 0.8, "release.psnr": 30.0,
        "runtime_s": 3.0, "runtime.data": 1.0, "runtime.task": 2.0,
    }
    assert attack_primary("membership", {"auc": 0.6, "auc_clean": 0.7, "chance": 0.5}) == "auc"
    assert attack_primary("unknown", {"a": 1, "b": 2}) is None


def test_counts_and_groups_go_to_tables():
    rows = attack_rows(_result())
    assert {"attack": "face_reid", "metric": "identities", "value": 10} in rows and len(rows) == 12
    groups = group_rows(GROUPS)
    assert [(r["source"], r["group"]) for r in groups] == [("utility", "female"), ("utility", "male"),
                                                           ("face_reid", "female"), ("face_reid", "male")]
    assert groups[0]["value"] == 0.5 and groups[0]["ci95"] == 0.1 and groups[0]["clean"] == 0.7
    assert groups[2]["privacy"] == 0.8 and groups[3]["flag"] == "group too small" and groups[3]["value"] is None
    assert group_rows({}) == []


def test_run_names_lead_with_the_mechanism_and_old_parameter_names_are_read():
    assert run_name("fewshot_synth_faces", "dp_pix", {"epsilon": 3, "block": 4}, 0) == \
        "dp_pix(epsilon=3, block=4) · s0 · fewshot_synth_faces"
    assert run_name("t", "m", {}, 1, "bf16") == "m() · s1 · t · bf16"
    old = dataclasses.make_dataclass("Data", ["params"])({"mech.block": "4", "task.epochs": "1"})
    new = dataclasses.make_dataclass("Data", ["params"])({"param.block": "8"})
    assert run_params(type("Run", (), {"data": old})) == {"block": "4"}
    assert run_params(type("Run", (), {"data": new})) == {"block": "8"}
