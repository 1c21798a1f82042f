"""benchmarks/main_job.py runs the README's main job cold and reads its stages; no timing is asserted."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_cold_run_reports_every_stage_and_the_budget_counts_the_adaptive_adversaries(tmp_path, benchmark_script):
    main_job = benchmark_script("main_job")
    result = main_job.run_cold(ROOT, "smoke", tmp_path / "run", device="cpu")
    assert result["device"] == "cpu" and main_job.hardware(result).endswith(" threads)")
    assert main_job.hardware({"device": "cuda:0", "versions": {"gpu": "NVIDIA H100 80GB HBM3"}}) == "NVIDIA H100 80GB HBM3"
    assert main_job.hardware({"device": "cpu", "versions": {"cpu": "AMD EPYC"}}) == "AMD EPYC"  # an older revision
    stages = result["stage_seconds"]
    assert {"data", "release", "task", *main_job.ADAPTIVE} <= set(stages)
    line = main_job.row("this checkout", result)
    assert line.startswith(f"this checkout: cell {result['runtime_s']:.1f} s (data ") and "face_reid_adapted" in line

    def fake(cell, adapted, denoise):
        return {"runtime_s": cell, "stage_seconds": {"task": 1.0, "attack.face_reid_adapted": adapted,
                                                     "attack.denoise": denoise}}

    assert main_job.budget_line([fake(80, 5, 5), fake(70, 5, 5), fake(90, 5, 5)]).endswith(
        "budget 60 s + adaptive adversaries 10.0 s = 70.0 s: over by 10.0 s (1.14x)")
    assert main_job.budget_line([fake(65, 4, 3)]).endswith("= 67.0 s: within it")
    assert main_job.budget_line([{"runtime_s": 50.0}]) == "no stage seconds recorded: budget not computed"
    assert main_job.row("old", {"runtime_s": 50.0}) == "old: cell 50.0 s (stages not recorded)"


def test_differing_metrics_are_listed_by_name(benchmark_script):
    main_job = benchmark_script("main_job")
    mine = {"utility": {"acc": 0.5, "ci": [0.4, 0.6]}, "attacks": {"face_reid": {"top1": 0.3}}, "privacy_score": 0.7}
    theirs = {"utility": {"acc": 0.5, "ci": [0.4, 0.61]}, "attacks": {"face_reid": {"top1": 0.3}, "denoise": {"mse": 1}},
              "privacy_score": 0.7}
    assert main_job.differences(mine, theirs) == ["attacks.denoise.mse: - -> 1", "utility.ci.1: 0.6 -> 0.61"]
    assert main_job.differences(mine, mine) == []
