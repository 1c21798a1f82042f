"""One way to configure: build_config (tuples, nested settings, "did you mean" at every level),
presets built by the task/attack itself, --set reaching loader options, nested ``set:`` in suites."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from bench.cell.plan import RunConfig, plan
from bench.core import registry
from bench.core.config import build_config, setting
from bench.errors import BenchError
from bench.scale.grid import Placement, expand, parse_suite


@dataclass(frozen=True)
class Optimiser:
    lr: float = setting(0.1, low=0, low_open=True)
    steps: tuple[int, ...] = (10, 20)


@dataclass(frozen=True)
class Config:
    data: dict = field(default_factory=dict)
    input_size: tuple = setting((256, 128), low=16, high=1024)
    lr_steps: tuple = setting((40, 70), low=0)
    names: tuple[str, ...] | None = None
    pair: tuple[int, float] = (1, 2.0)
    optimiser: Optimiser = field(default_factory=Optimiser)
    threads: int | None = setting(None, low=1)


def build(**values):
    return build_config(Config, values, "task 't'")


@pytest.mark.parametrize("given", ["128,64", "128x64", "128 x 64", "[128, 64]", [128, 64], (128, 64)])
def test_tuples_from_strings_and_lists_are_typed_like_the_default(given):
    assert build(input_size=given).input_size == (128, 64)


def test_tuple_elements_follow_the_annotation_and_text_can_be_empty_or_none():
    cfg = build(lr_steps="", names="gender, age", pair="3,4", threads="none")
    assert cfg.lr_steps == () and cfg.names == ("gender", "age") and cfg.pair == (3, 4.0)
    assert isinstance(cfg.pair[1], float) and cfg.threads is None
    assert build(names="none").names is None and build(lr_steps=7).lr_steps == (7,)


@pytest.mark.parametrize(
    "values, fragment",
    [
        ({"input_size": "64.5,32"}, "setting 'input_size' expects int, got '64.5'"),
        ({"input_size": "8x8"}, r"'input_size' must be in \[16, 1024\], got \(8, 8\)"),
        ({"lr_steps": "1,,2"}, "empty element"),
        ({"pair": "1,2,3"}, "expects 2 values"),
        ({"threads": [1, 2]}, "'threads' expects int"),
        ({"input_sise": "1,2"}, "no setting 'input_sise'; did you mean 'input_size'"),
        ({"names.x": 1}, "'names' is not a mapping"),
    ],
)
def test_bad_values_are_one_line_errors(values, fragment):
    with pytest.raises(BenchError, match=fragment):
        build(**values)


def test_nested_dataclass_settings_are_built_recursively():
    assert build(**{"optimiser.lr": "0.5"}).optimiser == Optimiser(lr=0.5)
    assert build(optimiser={"lr": 2, "steps": "1x2"}).optimiser == Optimiser(lr=2.0, steps=(1, 2))
    merged = build(optimiser={"lr": 2}, **{"optimiser.steps": "5"}).optimiser
    assert merged == Optimiser(lr=2.0, steps=(5,))
    assert build().optimiser == Optimiser()


@pytest.mark.parametrize(
    "values, fragment",
    [
        ({"optimiser.lrr": "1"}, "task 't' has no setting 'optimiser.lrr'; did you mean 'optimiser.lr'"),
        ({"optimiser": {"stepz": [1]}}, "did you mean 'optimiser.steps'"),
        ({"optimiser.lr": "0"}, r"setting 'optimiser.lr' must be in \(0, inf\)"),
        ({"optimiser": 3}, "is a group of settings"),
    ],
)
def test_nested_errors_name_the_dotted_setting(values, fragment):
    with pytest.raises(BenchError, match=fragment):
        build(**values)


def test_dotted_keys_set_mapping_entries_and_leave_their_checks_to_the_owner():
    cfg = build(data={"size": 64, "keep": 1}, **{"data.size": "32", "data.extra.deep": "true"})
    assert cfg.data == {"size": 32, "keep": 1, "extra": {"deep": True}}


def test_tasks_and_attacks_build_their_config_from_their_class():
    task = registry.tasks.get("reid_synth_persons")("smoke", {"input_size": "48x24", "lr_steps": "1,2"})
    assert task.config.input_size == (48, 24) and task.config.lr_steps == (1, 2)
    attack = registry.attacks.get("attribute_inference")("smoke", {"attributes": "gender,age", "test_splits": "none"})
    assert attack.config.attributes == ("gender", "age") and attack.config.test_splits is None
    with pytest.raises(BenchError, match="attack 'denoise' has no setting 'targetz'; did you mean 'targets'"):
        registry.attacks.get("denoise")("smoke", {"targetz": "identity"})


def test_set_reaches_the_celeba_loader_option(monkeypatch, tmp_path: Path):
    seen: dict = {}
    monkeypatch.setattr(registry.datasets.get("celeba"), "inspect", lambda self, root, options: seen.update(options))
    config = RunConfig(task="fewshot_celeba", mechanism="identity", profile="smoke", results_dir=tmp_path / "r",
                       overrides={"task": {"data.min_images": "10"}})
    plan(config)
    assert seen == {"min_images": 10, "crop": 176, "max_classes": 60}


def test_unknown_loader_option_keeps_the_loaders_own_error(tmp_path: Path):
    config = RunConfig(task="fewshot_celeba", mechanism="identity", profile="smoke", results_dir=tmp_path / "r",
                       overrides={"task": {"data.min_imagez": "10"}})
    with pytest.raises(BenchError, match=r"celeba: unknown option\(s\) \['min_imagez'\]"):
        plan(config)


SUITE = {"profile": "smoke", "seeds": [0], "benchmarks": ["reid_synth_persons"], "mechanisms": [{"name": "identity"}]}


def test_suite_set_accepts_nested_mappings_as_dotted_keys(tmp_path: Path):
    nested = parse_suite({**SUITE, "set": {"task": {"data": {"n_ids": 30}, "epochs": 2}}}, "t")
    assert nested.overrides == {"task": {"data.n_ids": 30, "epochs": 2}}
    where = Placement(results_dir=tmp_path / "r", device="cpu")
    (cell,) = expand(nested, where)
    (flat,) = expand(parse_suite({**SUITE, "set": {"task": {"data.n_ids": 30, "epochs": 2}}}, "t"), where)
    assert cell.key == flat.key and cell.config.overrides == {"task": {"data.n_ids": 30, "epochs": 2}}
    task = plan(cell.config).task
    assert task.data_options() == {"n_ids": 30, "per_id": 8} and task.config.epochs == 2


def test_suite_and_command_line_settings_merge_in_a_grid(capsys, tmp_path: Path):
    from bench.cli import main

    path = tmp_path / "nested.yaml"
    path.write_text(yaml.safe_dump({**SUITE, "set": {"task": {"data": {"n_ids": 30}}}}))
    code = main(["grid", "--suite", str(path), "--set", "task.data.per_id=6", "--dry-run",
                 "--results-dir", str(tmp_path / "r")])
    out = capsys.readouterr().out
    assert code == 0 and "1 cells, 0 finished, 1 to run" in out
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "set_, fragment",
    [
        ({"task": {"data": {}}}, "'data' is an empty mapping"),
        ({"task": {"data": {"n_ids": 1}, "data.n_ids": 2}}, "'data.n_ids' is set twice"),
        ({"task": {"data": [{"n_ids": 1}]}}, "must be a value, a list of values or a mapping"),
    ],
)
def test_suite_set_rejects_malformed_nesting(set_, fragment):
    with pytest.raises(BenchError, match=fragment):
        parse_suite({**SUITE, "set": set_}, "t")


def test_suite_nested_typo_suggests_at_its_level(tmp_path: Path):
    where = Placement(results_dir=tmp_path / "r", device="cpu")
    suite = parse_suite({**SUITE, "set": {"denoise": {"reid": {"enrol_per_idd": 5}}}}, "t")
    with pytest.raises(BenchError, match="has no setting 'enrol_per_idd'; did you mean 'enrol_per_id'"):
        expand(suite, where)
    suite = parse_suite({**SUITE, "set": {"attribute_inference": {"epochz": 1}}}, "t")
    with pytest.raises(BenchError, match="has no setting 'epochz'; did you mean 'epochs'"):
        expand(suite, where)
