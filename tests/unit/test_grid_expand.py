"""Suite parsing, validation and expansion into cells; command-line lists; no cell is computed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from bench.cell.plan import RunConfig, plan
from bench.cli import main
from bench.errors import BenchError
from bench.scale.grid import (
    CellOutcome,
    GridSummary,
    MechanismSpec,
    Placement,
    expand,
    load_suite,
    parse_suite,
    parse_value_lists,
    suite_names,
)

SMOKE = {
    "description": "test",
    "profile": "smoke",
    "seeds": [0, 1],
    "benchmarks": ["fewshot_synth_faces"],
    "set": {},
    "mechanisms": [
        {"name": "identity"},
        {"name": "pixelate", "grid": {"block": [4, 8]}},
        {"name": "image_dp", "grid": {"epsilon": [0.001, 1, "none"]},
         "zip": {"block": [1, 2, 4], "colours": [64, 32, 16]}},
    ],
}


@pytest.fixture
def where(tmp_path: Path) -> Placement:
    return Placement(results_dir=tmp_path / "results", device="cpu")


def suite(**changes):
    data = {**SMOKE, **changes}
    return parse_suite(data, "t")


def test_grid_is_a_product_and_zip_is_zipped_then_crossed():
    spec = MechanismSpec("image_dp", {"epsilon": (0.001, 1, "none")}, {"block": (1, 2, 4), "colours": (64, 32, 16)})
    settings = spec.settings()
    assert len(settings) == 9
    assert {"epsilon": "none", "block": 2, "colours": 32} in settings
    assert all((s["block"], s["colours"]) in {(1, 64), (2, 32), (4, 16)} for s in settings)
    assert MechanismSpec("identity").settings() == [{}]


def test_expand_counts_orders_by_seed_and_resolves_params(where):
    cells = expand(suite(), where)
    assert len(cells) == (1 + 2 + 9) * 2
    assert [c.config.seed for c in cells] == [0] * 12 + [1] * 12
    assert len({c.key for c in cells}) == len(cells)
    none_cells = [c for c in cells if c.config.mechanism == "image_dp" and c.config.params["epsilon"] is None]
    assert len(none_cells) == 6
    pixelate = next(c for c in cells if c.config.mechanism == "pixelate")
    assert pixelate.config.params == {"block": 4} and pixelate.config.profile == "smoke"
    assert pixelate.key == plan(RunConfig(task="fewshot_synth_faces", mechanism="pixelate", params={"block": "4"},
                                          seed=0, profile="smoke")).key
    assert not where.results_dir.exists()


def test_settings_that_resolve_alike_are_one_cell(where):
    cells = expand(suite(mechanisms=[{"name": "pixelate", "grid": {"block": [4, 4.0, "4"]}}], seeds=[0]), where)
    assert len(cells) == 1


def test_overrides_and_attacks_change_the_key(where):
    base = expand(suite(mechanisms=[{"name": "identity"}], seeds=[0]), where)[0]
    changed = expand(suite(mechanisms=[{"name": "identity"}], seeds=[0], set={"task": {"epochs": 1}}), where)[0]
    no_attacks = expand(suite(mechanisms=[{"name": "identity"}], seeds=[0], attacks=[]), where)[0]
    assert len({base.key, changed.key, no_attacks.key}) == 3
    assert changed.config.overrides == {"task": {"epochs": 1}} and no_attacks.config.attacks == ()


def test_a_changed_preset_is_another_cell_and_another_board(monkeypatch):
    import bench.core.interfaces as interfaces
    from bench.core.keys import content_key
    from leaderboard.protocol import BoardKey

    config = RunConfig(task="fewshot_synth_faces", mechanism="pixelate", params={"block": 4}, seed=0, profile="smoke")
    before, real = plan(config), interfaces.load_preset

    def edited(package, name, profile, owner=""):
        values = real(package, name, profile, owner)
        return {**values, "epochs": values["epochs"] + 1} if name == "face_reid" else values

    monkeypatch.setattr(interfaces, "load_preset", edited)
    after = plan(config)
    assert after.attacks["face_reid"].config.epochs == before.attacks["face_reid"].config.epochs + 1
    assert before.protocol != after.protocol and before.key != after.key
    boards = [BoardKey("b", "smoke", True, "fp", "{}", protocol) for protocol in ("", before.protocol, after.protocol)]
    assert len({board.id for board in boards}) == 3
    assert boards[0].id == content_key("board", "b", "smoke", True, "fp", "{}")[:12]  # boards of older results keep their ids


@pytest.mark.parametrize("module, owner, attribute", [
    ("tasks.fewshot", "FewShot", "version"),                    # the task's models changed
    ("bench.data.synthetic.synth_faces", "SynthFaces", "version"),    # the generator draws other faces
    ("attacks.face_reid", "FaceReid", "version"),               # an adversary's embedder changed
    ("bench.randomness.rng", None, "VERSION"),                             # every random stream changed
    ("bench.release.dataset", None, "RELEASE_FORMAT"),
    ("bench.release.facecrops", None, "VIEW_VERSION"),
])
def test_code_whose_numbers_changed_is_another_cell_and_another_board(monkeypatch, module, owner, attribute):
    """A FINISHED run of older code is never returned for, nor ranked beside, what today's code computes."""
    import importlib

    target = importlib.import_module(module)
    target = getattr(target, owner) if owner else target
    task = "classify_synth_scenes_obf_obf" if attribute == "VIEW_VERSION" else "fewshot_synth_faces"  # sees crops
    config = RunConfig(task=task, mechanism="pixelate", params={"block": 4}, seed=0, profile="smoke")
    before = plan(config)
    monkeypatch.setattr(target, attribute, getattr(target, attribute) + 1)
    after = plan(config)
    assert before.key != after.key and before.protocol != after.protocol
    monkeypatch.undo()
    assert plan(config).key == before.key


def test_the_face_crops_version_keys_only_the_cells_whose_adversaries_see_crops(monkeypatch):
    from bench.release import facecrops

    faces = RunConfig(task="fewshot_synth_faces", mechanism="pixelate", params={"block": 4}, seed=0, profile="smoke")
    scenes = dataclasses.replace(faces, task="classify_synth_scenes_obf_obf")
    no_crops = dataclasses.replace(scenes, attacks=("face_detect",))
    before = {name: plan(config).key for name, config in (("faces", faces), ("scenes", scenes), ("none", no_crops))}
    monkeypatch.setattr(facecrops, "VIEW_VERSION", facecrops.VIEW_VERSION + 1)
    assert plan(faces).key == before["faces"] and plan(no_crops).key == before["none"]
    assert plan(scenes).key != before["scenes"]


def test_a_training_method_is_another_cell_on_the_same_board():
    config = RunConfig(task="dp_vit_synth_objects", mechanism="identity", seed=0, profile="smoke")
    flat = plan(config)
    per_layer = plan(dataclasses.replace(config, overrides={"task": {"training.clipping": "per_layer"}}))
    assert per_layer.task.config.training.clipping == "per_layer"
    assert flat.key != per_layer.key and flat.protocol == per_layer.protocol


@pytest.mark.parametrize(
    "changes, fragment",
    [
        ({"seedz": [0]}, "unknown key 'seedz'; did you mean 'seeds'"),
        ({"seeds": []}, "'seeds' must be a non-empty list of integers"),
        ({"seeds": [0, 0]}, "lists a seed twice"),
        ({"seeds": "0"}, "'seeds' must be"),
        ({"benchmarks": "fewshot_synth_faces"}, "'benchmarks' must be a non-empty list"),
        ({"mechanisms": []}, "'mechanisms' must be a non-empty list"),
        ({"mechanisms": [{"name": "pixelate", "grd": {}}]}, "unknown key 'grd'; did you mean 'grid'"),
        ({"mechanisms": [{"grid": {}}]}, "missing key 'name'"),
        ({"mechanisms": [{"name": "pixelate", "grid": {"block": [[1, 2]]}}]}, "'block' must be a value or a non-empty list"),
        ({"mechanisms": [{"name": "pixelate", "grid": {"block": []}}]}, "'block' must be a value or a non-empty list"),
        ({"mechanisms": [{"name": "image_dp", "zip": {"block": [1, 2], "colours": [64]}}]}, "must have one length"),
        ({"mechanisms": [{"name": "image_dp", "grid": {"block": [1]}, "zip": {"block": [2]}}]}, "in both 'grid' and 'zip'"),
        ({"set": {"task": 3}}, "'task' must map settings to values"),
        ({"profile": None}, "'profile' must be a name"),
    ],
)
def test_structural_mistakes_are_one_bench_error(changes, fragment):
    with pytest.raises(BenchError) as info:
        parse_suite({**SMOKE, **changes}, "t")
    assert fragment in str(info.value)


def test_missing_key_is_named():
    data = dict(SMOKE)
    del data["benchmarks"]
    with pytest.raises(BenchError, match="missing key 'benchmarks'"):
        parse_suite(data, "t")


@pytest.mark.parametrize(
    "changes, fragment",
    [
        ({"benchmarks": ["fewshot_synth_face"]}, "unknown task 'fewshot_synth_face'"),
        ({"mechanisms": [{"name": "pixelat"}]}, "did you mean 'pixelate'"),
        ({"mechanisms": [{"name": "pixelate", "grid": {"block": [4, 0]}}]}, "mechanisms[0] (pixelate block=0)"),
        ({"mechanisms": [{"name": "pixelate", "grid": {"blok": [4]}}]}, "no parameter 'blok'"),
        ({"mechanisms": [{"name": "dp_pix", "grid": {"epsilon": ["none"]}}]}, "cannot be none"),
        ({"profile": "huge"}, "unknown profile"),
        ({"set": {"task": {"epochz": 1}}}, "did you mean 'epochs'"),
        ({"set": {"nosuch": {"x": 1}}}, "no section 'nosuch'"),
        ({"attacks": ["face_reidd"]}, "unknown attack"),
    ],
)
def test_names_and_values_are_checked_before_any_cell_runs(where, changes, fragment):
    with pytest.raises(BenchError) as info:
        expand(suite(**changes), where)
    assert fragment in str(info.value) and "suite 't'" in str(info.value)
    assert not where.results_dir.exists()


def test_shipped_suites_load_and_expand(where):
    assert {"smoke", "standard"} <= set(suite_names())
    smoke = expand(load_suite("smoke"), where)
    assert len(smoke) >= 12
    assert {c.config.task for c in smoke} == {"fewshot_synth_faces"}
    assert {c.config.mechanism for c in smoke} >= {"identity", "pixelate", "blur", "dp_pix"}
    standard = load_suite("standard")
    assert standard.profile == "quick" and len(standard.seeds) >= 2
    assert len(expand(standard, where)) > len(smoke)


def test_suite_file_path_and_bad_yaml(tmp_path: Path):
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(SMOKE))
    assert load_suite(str(path)).name == "mine"
    path.write_text("profile: [smoke\n")
    with pytest.raises(BenchError, match="not valid YAML"):
        load_suite(str(path))
    with pytest.raises(BenchError, match="unknown suite 'nope'.*smoke"):
        load_suite("nope")
    with pytest.raises(BenchError, match="no suite file"):
        load_suite(str(tmp_path / "missing.yaml"))


def test_restrict_to_mechanisms_and_benchmarks():
    s = suite()
    assert [m.name for m in s.restrict(["pixelate"]).mechanisms] == ["pixelate"]
    with pytest.raises(BenchError, match="has no mechanism 'blur'"):
        s.restrict(["blur"])
    with pytest.raises(BenchError, match="has no benchmark"):
        s.restrict(None, ["reid_market1501"])


def test_value_lists_from_the_command_line():
    assert parse_value_lists(["block=4,8", "m = 1"]) == {"block": ["4", "8"], "m": ["1"]}
    for bad, fragment in ((["block"], "NAME=V1,V2"), (["block=4,,8"], "empty value"), (["a=1", "a=2"], "given twice")):
        with pytest.raises(BenchError, match=fragment):
            parse_value_lists(bad)


def test_summary_counts_and_lists_failures():
    outcomes = [CellOutcome("a", "A", "done"), CellOutcome("b", "B", "skipped"),
                CellOutcome("c", "C", "failed", error="ValueError: boom")]
    text = GridSummary(outcomes, 65.0).format()
    assert text.splitlines()[0] == "grid: 3 cells: 1 done, 1 skipped (already finished), 1 failed in 1m05s"
    assert "failed: C: ValueError: boom" in text


def _cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_lists_dry_run(capsys, tmp_path):
    code, out, err = _cli(capsys, "grid", "--task", "fewshot_synth_faces", "--mechanism", "pixelate,blur",
                          "--param", "block=4,8", "--seeds", "0,1", "--profile", "smoke", "--dry-run",
                          "--results-dir", str(tmp_path / "r"))
    assert code == 2 and "blur" in err and "no parameter 'block'" in err
    code, out, err = _cli(capsys, "grid", "--task", "fewshot_synth_faces", "--mechanism", "pixelate",
                          "--param", "block=4,8", "--seeds", "0,1", "--profile", "smoke", "--dry-run",
                          "--results-dir", str(tmp_path / "r"))
    assert code == 0, err
    assert out.strip().splitlines()[-1] == "grid: 4 cells, 0 finished, 4 to run"
    assert not (tmp_path / "r").exists()


def test_cli_suite_with_overrides_dry_run(capsys, tmp_path):
    code, out, _ = _cli(capsys, "grid", "--suite", "smoke", "--mechanism", "pixelate", "--seeds", "3",
                        "--attacks", "none", "--dry-run", "--results-dir", str(tmp_path / "r"))
    assert code == 0
    lines = out.strip().splitlines()
    assert lines[-1] == "grid: 2 cells, 0 finished, 2 to run"
    assert all("seed 3" in line for line in lines[:-1])


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["--mechanism", "pixelate"], "give --suite NAME, or --task and --mechanism"),
        (["--suite", "nope"], "unknown suite"),
        (["--suite", "smoke", "--mechanism", "gaussian_noise"], "has no mechanism 'gaussian_noise'"),
        (["--suite", "smoke", "--seeds", "a"], "--seeds expects comma-separated integers"),
        (["--suite", "smok"], "unknown suite 'smok'; did you mean 'smoke'?"),
        (["--suite", "smoke", "--seeds", ""], "--seeds needs at least one integer"),
        (["--task", "fewshot_synth_faces", "--mechanism", "pixelate", "--seeds", " , "], "--seeds needs at least one"),
        (["--suite", "smoke", "--set", "task.epochz=1"], "did you mean 'epochs'"),
    ],
)
def test_cli_errors_are_one_line_exit_2(capsys, tmp_path, argv, fragment):
    code, _, err = _cli(capsys, "grid", *argv, "--results-dir", str(tmp_path / "r"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and fragment in err
    assert not (tmp_path / "r").exists()


def test_finished_cells_on_real_data_go_to_workers_to_be_checked(monkeypatch):
    """A real-data cell's FINISHED run may predate a change of its files: a worker checks it (cellrun.data_changed)."""
    import bench.scale.grid as grid_module
    from bench.scale.grid import Cell, pending

    cells = [Cell(RunConfig(task=task, mechanism="identity"), key, key) for task, key in (
        ("fewshot_synth_faces", "synthetic-done"), ("fewshot_folder", "real-done"), ("fewshot_folder", "real-new"),
        ("transfer_synth_scenes_synth_faces", "synthetic-transfer-done"))]
    finished = {"synthetic-done": ["run1"], "real-done": ["run2"], "synthetic-transfer-done": ["run3"]}
    monkeypatch.setattr(grid_module, "finished_runs",
                        lambda tracker, keys: {k: finished[k] for k in keys if k in finished})
    todo, done = pending(cells, tracker=None)
    assert [c.key for c in todo] == ["real-done", "real-new"] and done == finished
    # A real dataset the task reads besides its own (a transfer target) makes the cell real too.
    from tasks.transfer import Transfer

    monkeypatch.setattr(Transfer, "other_datasets", lambda self: ("folder",))
    todo, _ = pending(cells, tracker=None)
    assert [c.key for c in todo] == ["real-done", "real-new", "synthetic-transfer-done"]
