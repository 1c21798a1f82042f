"""The CLI end to end on the smoke profile: run, show, list, and every user error."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.smoke_cells import EMBEDDER_EPOCHS

from bench.cli import main
from bench.storage.tracking import Tracker

ROOT = Path(__file__).resolve().parents[2]


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _run_args(results: Path, cache: Path, *extra: str) -> list[str]:
    profile = [] if "--profile" in extra else ["--profile", "smoke"]  # an option is given once
    return ["run", "--task", "fewshot_synth_faces", *profile, "--results-dir", str(results),
            "--cache-dir", str(cache), "-q", *extra]


def _run_id(out: str) -> str:
    line = next(line for line in out.splitlines() if line.startswith("logged: MLflow run "))
    return line.split()[3]


def test_run_prints_utility_attack_and_where_it_was_logged(capsys, tmp_path, shared_cache):
    results = tmp_path / "results"
    code, out, err = _run(capsys, *_run_args(results, shared_cache, "--mechanism", "dp_pix", "--param", "epsilon=3",
                                             "--param", "block=4", *EMBEDDER_EPOCHS))
    assert code == 0, err
    assert "utility.acc *" in out and "±" in out
    assert "attack.face_reid.top1" in out and "privacy_score" in out
    assert "attack.face_reid_adapted.top1" in out and "attack.denoise.top1_raw" in out
    assert "utility.acc_denoiser" in out
    assert "epsilon=3 [m-pixel (m=1)]" in out
    assert "mlflow.db" in out
    run_id = _run_id(out)
    code, shown, _ = _run(capsys, "show", run_id, "--results-dir", str(results))
    assert code == 0 and "attack.face_reid.top1" in shown
    code, raw, _ = _run(capsys, "show", run_id, "--json", "--results-dir", str(results))
    data = json.loads(raw)
    assert data["mechanism"] == "dp_pix" and data["params"] == {"epsilon": 3.0, "block": 4, "m": 1}
    assert data["claim"]["unit"] == "m-pixel (m=1)"
    assert 0.0 <= data["privacy_score"] <= 1.0
    stages = data["stage_seconds"]
    assert set(stages) == {"data", "release", "task", "attack.face_reid", "attack.face_reid_adapted", "attack.denoise"}
    assert all(s >= 0 for s in stages.values()) and sum(stages.values()) <= data["runtime_s"]
    assert "  stages: data " in out and ", task " in out and ", attack.denoise " in out
    logged = Tracker(results, create=False).client.get_run(run_id).data.metrics
    assert logged["runtime.task"] == pytest.approx(stages["task"])


@pytest.mark.slow
def test_same_command_twice_gives_identical_metrics(capsys, tmp_path):
    metrics = []
    for attempt in range(2):
        results, cache = tmp_path / f"r{attempt}", tmp_path / f"c{attempt}"
        code, out, err = _run(capsys, *_run_args(results, cache, "--mechanism", "dp_pix", "--seed", "3"))
        assert code == 0, err
        _, raw, _ = _run(capsys, "show", _run_id(out), "--json", "--results-dir", str(results))
        data = json.loads(raw)
        metrics.append((data["utility"], data["attacks"], data["privacy"]))
    assert metrics[0] == metrics[1]


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["--mechanism", "dp_pxi"], "did you mean 'dp_pix'"),
        (["--mechanism", "dp_pix", "--param", "epsilon=-1"], "epsilon"),
        (["--mechanism", "dp_pix", "--param", "block=0"], "block"),
        (["--mechanism", "dp_pix", "--param", "epsilon=abc"], "expects float"),
        (["--mechanism", "dp_pix", "--param", "bogus=1"], "no parameter 'bogus'"),
        (["--mechanism", "dp_pix", "--profile", "huge"], "unknown profile"),
        (["--mechanism", "dp_pix", "--set", "task.epochz=2"], "did you mean 'epochs'"),
        (["--mechanism", "dp_pix", "--set", "nosuch.x=1"], "no section"),
        (["--mechanism", "face_blur", "--set", "release.boxes=maybe"], "release.boxes=dataset|detect"),
    ],
)
def test_user_errors_are_one_line_exit_2_and_write_nothing(capsys, tmp_path, argv, fragment):
    results = tmp_path / "results"
    code, out, err = _run(capsys, *_run_args(results, tmp_path / "cache", *argv))
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and fragment in err
    assert "Traceback" not in err
    assert not results.exists()


def test_missing_celeba_names_the_layout(capsys, tmp_path):
    results = tmp_path / "results"
    code, _, err = _run(capsys, "run", "--mechanism", "dp_pix", "--task", "fewshot_celeba", "--results-dir", str(results),
                        "--data-root", str(tmp_path / "nodata"), "-q")
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert "img_align_celeba" in err and "identity_CelebA.txt" in err
    assert not results.exists()


def test_show_unknown_run_is_a_user_error(capsys, tmp_path):
    code, _, err = _run(capsys, "show", "0" * 32, "--results-dir", str(tmp_path / "none"))
    assert code == 2 and "no results database" in err


def test_list_shows_parameters_ranges_and_claims(capsys):
    code, out, _ = _run(capsys, "list", "mechanisms")
    assert code == 0
    assert "dp_pix" in out and "epsilon" in out and "(0, inf)" in out and "m-pixel" in out
    code, out, _ = _run(capsys, "list", "tasks")
    assert "fewshot_synth_faces" in out and "face_reid, face_reid_adapted, denoise" in out
    code, out, _ = _run(capsys, "list", "datasets")
    assert "synth_faces" in out and "img_align_celeba" in out


def test_console_script_usage_error_is_one_line(tmp_path):
    exe = shutil.which("bench", path=str(Path(sys.executable).parent)) or "bench"
    proc = subprocess.run([exe, "run", "--mechanism", "identity"], capture_output=True, text=True,
                          env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"})
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "--task" in proc.stderr


def test_help_imports_neither_torch_nor_numpy():
    """``bench --help`` (every command's options) starts without the heavy libraries."""
    code = ("import sys\nfrom bench.cli import build_parser\nbuild_parser().format_help()\n"
            "print(sorted(m for m in ('torch', 'numpy', 'mlflow', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
