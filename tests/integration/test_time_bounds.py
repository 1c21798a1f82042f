"""Issue 57's unbounded time and issue 58's stated durations: a plan-time time estimate, a bound and its override.

Every setting that only costs time (epochs, a mechanism's training steps, tune or audit
trials, a verify's sample) is estimated in the plan: beyond 24 h it is refused before any
work, in one line naming it, and ``--allow-long`` runs it anyway; a long cell, audit, tune,
verify and grid print what they are expected to take before they start.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from bench.cell import estimate, estimate_store
from bench.cell.plan import RunConfig, plan
from tests.integration.test_bad_inputs import run_cli

FS = "fewshot_synth_faces"
ROOT = Path(__file__).resolve().parents[2]


class Started(Exception):
    """Raised by a stand-in for the work a command starts once its checks have passed."""


def refused(code: int, out: str, err: str, *phrases: str) -> None:
    assert code == 2, (code, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for phrase in (*phrases, "--allow-long"):
        assert phrase in err, (phrase, err)


RUNS = [
    (["--mechanism", "pixelate", "--set", "task.epochs=1000000000"], "task.epochs=1000000000"),
    (["--mechanism", "pixelate", "--profile", "smoke", "--set", "task.epochs=1000000000"], "task.epochs=1000000000"),
    (["--mechanism", "dp_latent", "--param", "steps=1000000000000"], "dp_latent steps=1000000000000"),
    (["--mechanism", "pixelate", "--set", "denoise.epochs=1000000000"], "denoise.epochs=1000000000"),
]


@pytest.mark.parametrize("argv, named", RUNS, ids=["epochs", "epochs-smoke", "dp_latent-steps", "attack-epochs"])
def test_a_cell_beyond_the_bound_is_refused_before_any_work(tmp_path, argv, named):
    results = tmp_path / "results"
    code, out, err = run_cli(["run", "--task", FS, *argv, "--results-dir", str(results)])
    refused(code, out, err, named, "this cell would take", "beyond the 24.0 h bound")
    assert not results.exists()


def test_the_refusal_names_every_setting_given_that_raises_the_estimate(tmp_path):
    code, out, err = run_cli(["run", "--task", FS, "--mechanism", "dp_latent", "--param", "steps=1000000", "--set",
                              "task.epochs=600", "--set", "task.lr=0.01", "--results-dir", str(tmp_path / "r")])
    refused(code, out, err, "dp_latent steps=1000000, task.epochs=600: this cell would take about ")
    assert "task.lr" not in err


@pytest.mark.parametrize("argv, named", RUNS[:3], ids=["epochs", "epochs-smoke", "dp_latent-steps"])
def test_allow_long_runs_it(tmp_path, monkeypatch, argv, named):
    import bench.cell.run

    def execute(planned, *args, **kwargs):
        raise Started(planned.estimate.seconds)

    monkeypatch.setattr(bench.cell.run, "execute", execute)
    with pytest.raises(Started) as started:
        run_cli(["run", "--task", FS, *argv, "--allow-long", "--results-dir", str(tmp_path / "results")])
    assert started.value.args[0] > estimate.BOUND_S


def test_run_prints_the_expected_time_on_stderr(tmp_path, monkeypatch, capsys):
    import bench.cell.run
    from bench.cli import main

    monkeypatch.setattr(bench.cell.run, "execute", lambda *a, **k: (_ for _ in ()).throw(Started()))
    with pytest.raises(Started):
        main(["run", "--task", FS, "--mechanism", "dp_pix", "--results-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert err.startswith("[bench] expected about ") and " min (from the shipped baselines' fewshot_synth_faces" in err
    assert f"on {estimate.reference(FS, 'quick').cpu})" in err  # the CPU the shipped cells ran on


def test_a_short_cell_prints_no_estimate():
    assert estimate_store.expected_line(estimate.Estimate(30.0, source="x")) is None
    assert estimate_store.expected_line(estimate.Estimate(90.0, source="x")) == "[bench] expected about 2 min (from x)"


# --- blur radius: no time to bound, and the range Pillow takes ------------------------------


def test_blur_radius_1e9_costs_what_radius_2_costs_and_3e9_is_refused(tmp_path):
    near = plan(RunConfig(task=FS, mechanism="blur", params={"radius": 2}, results_dir=tmp_path)).estimate
    far = plan(RunConfig(task=FS, mechanism="blur", params={"radius": 1e9}, results_dir=tmp_path)).estimate
    assert far.seconds == near.seconds and not far.given
    code, out, err = run_cli(["run", "--task", FS, "--mechanism", "blur", "--param", "radius=3e9",
                              "--results-dir", str(tmp_path / "results")])
    assert code == 2 and "'radius' must be a float in [0, 2e+09]" in err and not (tmp_path / "results").exists()


@pytest.mark.parametrize("radius", [15.0, 16.0, 40.0, 1e4, 1e9, 2e9])
def test_the_torch_blur_of_a_radius_past_the_image_is_pillow_s_in_linear_time(radius):
    from mechanisms._blur import _box_pass, gaussian_blur, pil_box_weights

    images = torch.randint(0, 256, (3, 3, 17, 13), generator=torch.Generator().manual_seed(1), dtype=torch.uint8)
    if radius <= 1e4:  # the padded pass, as it was, is affordable here: the shortcut gives its bytes
        whole, inner, edge = pil_box_weights(radius)
        lines = images.to(torch.int32)
        index = torch.arange(-whole - 1, 17 + whole + 1).clamp_(0, 16)
        padded = lines.index_select(-2, index)
        csum = padded.cumsum(-2, dtype=torch.int32)
        window = csum.narrow(-2, 2 * whole + 1, 17) - csum.narrow(-2, 0, 17)
        far = padded.narrow(-2, 0, 17) + padded.narrow(-2, 2 * whole + 2, 17)
        low = window * (inner & 255) + far * (edge & 255)
        padded_pass = (window * (inner >> 8) + far * (edge >> 8) + ((low + (1 << 23)) >> 8)) >> 16
        assert torch.equal(_box_pass(lines, whole, inner, edge), padded_pass)
    if radius < 1e4 or radius >= 1e9:  # where the two backends agree (they part at 1e5..1e7 on small images)
        assert torch.equal(gaussian_blur(images, radius, "torch"), gaussian_blur(images, radius, "pil"))


def test_dp_pix_at_epsilon_1e_300_releases_noise_that_does_not_depend_on_the_image():
    """Not a time problem: the noise scale overflows float32 to infinity, so every cell mean is 0 or 255 at random."""
    from bench.core.interfaces import Streams
    from bench.core.registry import mechanisms

    mechanism = mechanisms.get("dp_pix")(epsilon=1e-300)
    black, white = torch.zeros(4, 3, 16, 16, dtype=torch.uint8), torch.full((4, 3, 16, 16), 255, dtype=torch.uint8)
    one, two = (mechanism.apply(x, generator=Streams.for_images(0, "t", 4)) for x in (black, white))
    assert torch.equal(one, two)
    assert set(one.unique().tolist()) <= {0, 255} and 0.3 < (one == 255).float().mean() < 0.7


# --- tune, audit, verify ------------------------------------------------------------------


def test_tune_refuses_a_billion_trials_and_runs_them_with_allow_long(tmp_path, monkeypatch, capsys):
    import bench.scale.tune
    from bench.cli import main

    results = tmp_path / "results"
    argv = ["tune", "--mechanism", "pixelate", "--task", FS, "--trials", "1000000000", "--results-dir", str(results)]
    refused(*run_cli(argv), "--trials 1000000000", "this study would take")
    assert not results.exists()

    def study(config, on_trial, on_start):
        on_start()  # everything checked: the estimate is printed before the first trial
        raise Started()

    monkeypatch.setattr(bench.scale.tune, "tune", study)
    with pytest.raises(Started):
        main([*argv, "--allow-long"])
    assert capsys.readouterr().err.startswith("[bench] tune: 1000000000 trials expected to take about ")


def test_audit_refuses_a_billion_trials_and_runs_them_with_allow_long(monkeypatch, capsys):
    import bench.audit
    from bench.cli import main

    argv = ["audit", "--mechanism", "dp_pix", "--trials", "1000000000", "--image-size", "256"]
    refused(*run_cli(argv), "--trials 1000000000", "this audit would take", "trials timed on this machine")
    monkeypatch.setattr(bench.audit, "audit_mechanism", lambda *a, **k: (_ for _ in ()).throw(Started()))
    with pytest.raises(Started):
        main([*argv, "--allow-long"])
    assert "1,000,000,000 trials per input expected to take about " in capsys.readouterr().err


def test_audit_prints_its_estimate_first(monkeypatch, capsys):
    import bench.audit
    from bench.cli import main

    monkeypatch.setattr(bench.audit, "audit_mechanism", lambda *a, **k: (_ for _ in ()).throw(Started()))
    with pytest.raises(Started):
        main(["audit", "--mechanism", "dp_pix", "--trials", "2000"])
    assert capsys.readouterr().err.startswith("[bench] audit dp_pix: 2,000 trials per input expected to take about ")


@pytest.fixture
def entry(tmp_path: Path) -> Path:
    """A copy of a shipped baseline entry (verify writes its record beside the entry)."""
    path = tmp_path / "dp-pix.json"
    shutil.copy(ROOT / "leaderboard" / "entries" / "dp-pix-ca7f9f5a.json", path)
    return path


def test_verify_says_it_samples_every_cell_and_its_estimate_before_any_work(entry, monkeypatch, capsys):
    import leaderboard.reproduce
    from bench.cli import main

    monkeypatch.setattr(leaderboard.reproduce, "reproduce", lambda *a, **k: (_ for _ in ()).throw(Started()))
    with pytest.raises(Started):
        main(["leaderboard", "verify", str(entry), "--sample", "100000"])
    out = capsys.readouterr().out.splitlines()
    cells = len(json.loads(entry.read_text())["cells"])
    assert out[1] == f"recomputing all {cells} of {cells} cells: --sample 100000 is more than the entry has"
    assert out[2].startswith("estimate: about ") and "as the cells took on" in out[2]


def test_verify_refuses_a_sample_that_took_longer_than_the_bound(entry):
    data = json.loads(entry.read_text())
    for cell in data["cells"]:
        cell["runtime_s"] = 86400.0
    entry.write_text(json.dumps(data))
    refused(*run_cli(["leaderboard", "verify", str(entry), "--sample", "100000"]), "--sample 100000",
            f"recomputing {len(data['cells'])} cells would take about")
    assert sorted(p.name for p in entry.parent.iterdir()) == [entry.name]  # no record written


# --- grid: the ETA from the first second --------------------------------------------------


def test_grid_prints_its_expected_time_before_the_first_cell(tmp_path, monkeypatch, capsys):
    import bench.scale.executors
    from bench.cli import main

    monkeypatch.setattr(bench.scale.executors, "run_cells", lambda *a, **k: [])
    main(["grid", "--task", FS, "--mechanism", "pixelate,dp_latent", "--seeds", "0,1", "--results-dir",
          str(tmp_path / "results")])
    err = capsys.readouterr().err.splitlines()
    assert err[1].startswith("[bench] grid: expected about ") and " of cell time" in err[1]
    assert "shipped baselines' fewshot_synth_faces cells (quick)" in err[1]


def test_grid_eta_covers_the_whole_grid_from_the_start():
    from bench.cell.outcome import CellOutcome
    from bench.scale.grid import GridProgress

    progress = GridProgress(3, expected={"a": 100.0, "b": 100.0, "c": 200.0}, workers=2)
    assert progress.eta() == pytest.approx(200.0)
    progress.started -= 50.0  # the first cell took half its estimate
    progress(CellOutcome("a", "a", "done", "run", 50.0))
    assert progress.eta() == pytest.approx(150.0, rel=0.01)


# --- this machine's earlier cells ---------------------------------------------------------


class _Run:
    def __init__(self, runtime: float, epochs: int):
        self.data = type("Data", (), {})()
        self.data.metrics = {"runtime_s": runtime}
        self.data.params = {"task.epochs": str(epochs), "param.block": "4"}
        self.data.tags = {"bench.mechanism": "pixelate"}


class _Tracker:
    experiment_id = "0"

    def __init__(self, runs):
        self.client = type("Client", (), {"search_runs": lambda _self, *a, **k: runs})()


def test_earlier_cells_on_this_machine_calibrate_the_estimate():
    base = estimate.estimate_settings(FS, "quick", (), {"task.epochs": 6}, "pixelate", {}).seconds
    factor, runs = estimate_store.machine_factor(_Tracker([_Run(base / 2, 6), _Run(base / 2, 6), _Run(base, 6)]),
                                                 FS, "quick")
    assert runs == 3 and factor == pytest.approx(0.5, rel=0.01)
    calibrated = estimate_store.calibrated(estimate.Estimate(100.0, {"task": 100.0}, source="s"), factor, runs)
    assert calibrated.seconds == pytest.approx(50.0, rel=0.01) and calibrated.source.startswith("3 earlier cells")
    assert estimate_store.machine_factor(_Tracker([]), FS, "quick") == (1.0, 0)
    doubled, _ = estimate_store.machine_factor(_Tracker([_Run(base, 12)]), FS, "quick")  # twice the epochs, same time
    assert doubled < factor * 2 and doubled == pytest.approx(base / estimate.estimate_settings(
        FS, "quick", (), {"task.epochs": 12}, "pixelate", {}).seconds)
