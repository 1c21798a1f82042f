"""Benchmarks declared once: (task kind, dataset, adversaries, attribute targets) in one table."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest
import torch
import yaml

from bench.cell.plan import RunConfig, plan
from bench.cli import main
from bench.core import registry
from bench.core.benchmarks import Benchmark, declare_benchmark, declared_attributes, declared_targets
from bench.core.interfaces import RunContext, Task
from bench.errors import BenchError
from tasks.fewshot import FewShot
from tasks.fidelity import Fidelity
from tasks.reid import Reid

FACES = ("face_reid", "face_reid_adapted", "denoise")
REAL_FACES = FACES + ("face_reid_pretrained", "face_reid_pretrained_adapted", "face_reid_pretrained_restored")
"""Real faces are attacked by pretrained recognizers too (on by default where the faces are real)."""
PERSONS = ("attribute_inference", "denoise")
PEDESTRIANS = ("identity_linkage", *PERSONS)
"""Pedestrians are linked to a clean gallery too (identity_linkage needs no attribute labels)."""
EXISTING = {
    "fewshot_synth_faces": (FewShot, "synth_faces", FACES, ()),
    "fewshot_celeba": (FewShot, "celeba", REAL_FACES, ()),
    "reid_synth_persons": (Reid, "synth_persons", PEDESTRIANS, ("gender",)),
    "reid_market1501": (Reid, "market1501", PEDESTRIANS, ("gender",)),
    "attributes_fairface": (Fidelity, "fairface", PERSONS, ("gender", "age", "race")),
}
NEW = {"fewshot_folder": "folder", "fewshot_omniglot": "omniglot", "fewshot_miniimagenet": "miniimagenet"}


def ctx(tmp_path: Path, benchmark: str = "") -> RunContext:
    return RunContext(device=torch.device("cpu"), seed=0, profile="smoke", data_root=None, cache_dir=tmp_path,
                      benchmark=benchmark)


@pytest.mark.parametrize("name", sorted(EXISTING))
def test_existing_names_are_declared_benchmarks_and_tasks(name):
    kind, dataset, attacks, attributes = EXISTING[name]
    declared = registry.benchmarks.get(name)
    assert (declared.kind, declared.dataset, declared.attacks, declared.attributes) == (kind, dataset, attacks, attributes)
    task = registry.tasks.get(name)
    assert issubclass(task, kind) and task.name == name and task.benchmark is declared
    assert (task.dataset, task.attacks) == (dataset, attacks) and task.description
    assert declared.has_preset() and task("smoke").config.data


@pytest.mark.parametrize("name", sorted(NEW))
@pytest.mark.parametrize("profile", ["smoke", "quick", "paper"])
def test_new_fewshot_benchmarks_have_every_profile(name, profile):
    declared = registry.benchmarks.get(name)
    assert declared.kind is FewShot and declared.dataset == NEW[name] and declared.has_preset()
    config = registry.tasks.get(name)(profile).config
    assert (config.test_way, config.test_shot) == (5, 5)


def test_new_benchmarks_follow_the_papers_table_ii():
    omniglot = registry.tasks.get("fewshot_omniglot")("paper").config
    assert omniglot.data["size"] == omniglot.image_size == 28 and omniglot.train_way == 60
    assert (omniglot.epochs, omniglot.patience, omniglot.test_episodes) == (500, 50, 1000)
    mini = registry.tasks.get("fewshot_miniimagenet")("paper").config
    assert "size" not in mini.data and mini.image_size == 84 and (mini.train_way, mini.train_query) == (5, 15)
    folder = registry.tasks.get("fewshot_folder")("quick").config
    assert folder.train_shot + folder.train_query <= 10 and folder.test_shot + folder.test_query == 10
    assert folder.data["root"] is None


@pytest.mark.parametrize("name", sorted(NEW))
@pytest.mark.parametrize("profile", ["smoke", "quick", "paper"])
def test_new_benchmarks_reach_their_datasets_loader(name, profile, tmp_path):
    """Planning gets past the settings: it stops at the loader's missing-data error (its options are
    parsed first), or at the registry's while the dataset is not written yet."""
    dataset = NEW[name]
    config = RunConfig(task=name, mechanism="identity", profile=profile, results_dir=tmp_path / "r",
                       data_root=tmp_path / "empty")
    with pytest.raises(BenchError, match=rf"^({dataset}: .*(not found|no image tree)|unknown dataset '{dataset}')"):
        plan(config)


def test_a_benchmark_is_one_line_and_may_share_a_preset(tmp_path):
    with registry.scoped():
        declared = declare_benchmark("fewshot_shared_test", FewShot, "synth_faces", ("face_reid",),
                                     preset="fewshot_synth_faces")
        assert isinstance(declared, Benchmark) and registry.benchmarks.get("fewshot_shared_test") is declared
        shared = plan(RunConfig(task="fewshot_shared_test", mechanism="identity", profile="smoke",
                                results_dir=tmp_path / "r"))
        own = plan(RunConfig(task="fewshot_synth_faces", mechanism="identity", profile="smoke",
                             results_dir=tmp_path / "r", attacks=("face_reid",)))
        assert shared.task.config == own.task.config and list(shared.attacks) == ["face_reid"]
        assert shared.key != own.key and shared.task.name == "fewshot_shared_test"
    assert "fewshot_shared_test" not in registry.benchmarks and "fewshot_shared_test" not in registry.tasks


def test_a_missing_preset_is_one_line_at_plan_time(tmp_path):
    with registry.scoped():
        declared = declare_benchmark("fewshot_nopreset_test", FewShot, "synth_faces")
        assert not declared.has_preset()
        with pytest.raises(BenchError, match="task 'fewshot_nopreset_test' has no preset file "
                                             "tasks/presets/fewshot_nopreset_test.yaml"):
            plan(RunConfig(task="fewshot_nopreset_test", mechanism="identity", profile="smoke",
                           results_dir=tmp_path / "r"))


@pytest.mark.parametrize(
    "args, kwargs, fragment",
    [
        (("fewshot_celeba", FewShot, "celeba"), {}, "already registered"),
        (("bad_kind_test", object, "celeba"), {}, "Task subclass"),
        (("bad_targets_test", FewShot, "celeba"), {"targets": ("faces",)}, "targets must name"),
        (("bad_attacks_test", FewShot, "celeba", "face_reid"), {}, "attacks must be a tuple"),
        (("bad_optional_test", FewShot, "celeba", ("face_reid",)), {"optional_face_crops": "how"}, "needs face_crops"),
    ],
)
def test_malformed_declarations_raise(args, kwargs, fragment):
    with registry.scoped(), pytest.raises(ValueError, match=fragment):
        declare_benchmark(*args, **kwargs)


def test_attacks_read_their_targets_from_the_run_benchmark(tmp_path):
    assert declared_attributes(ctx(tmp_path, "reid_market1501"), "market1501", "attribute_inference") == ("gender",)
    assert declared_targets(ctx(tmp_path, "reid_market1501"), "market1501", "denoise") == ("attributes",)
    assert declared_targets(ctx(tmp_path, "fewshot_celeba"), "celeba", "denoise") == ("identity",)
    # A context without a benchmark (a script) is served by the dataset's benchmarks.
    assert declared_attributes(ctx(tmp_path), "fairface", "attribute_inference") == ("gender", "age", "race")
    assert declared_attributes(ctx(tmp_path), "nowhere", "attribute_inference") == ()
    inference = registry.attacks.get("attribute_inference")("smoke")
    denoise = registry.attacks.get("denoise")("smoke")
    assert inference.attributes_for("synth_persons", ctx(tmp_path, "reid_synth_persons")) == ("gender",)
    assert denoise.targets_for("synth_faces", ctx(tmp_path, "fewshot_synth_faces")) == ("identity",)
    with pytest.raises(BenchError, match="no attributes declared for benchmark 'fewshot_celeba'"):
        inference.attributes_for("celeba", ctx(tmp_path, "fewshot_celeba"))
    chosen = registry.attacks.get("attribute_inference")("smoke", {"attributes": "age"})
    assert chosen.attributes_for("fairface", ctx(tmp_path, "attributes_fairface")) == ("age",)


def test_benchmarks_of_one_dataset_may_declare_different_targets(tmp_path):
    with registry.scoped():
        declare_benchmark("attributes_persons_test", Fidelity, "synth_persons", PERSONS, attributes=("age",),
                          preset="attributes_fairface")
        run = ctx(tmp_path, "attributes_persons_test")
        assert declared_attributes(run, "synth_persons", "attribute_inference") == ("age",)
        with pytest.raises(BenchError, match="declare different targets"):
            declared_attributes(ctx(tmp_path), "synth_persons", "attribute_inference")


def test_attack_presets_name_no_dataset():
    datasets = set(registry.datasets.list()) | set(NEW.values())

    def keys(node):
        if isinstance(node, dict):
            for key, value in node.items():
                yield key
                yield from keys(value)

    for preset in (resources.files("attacks") / "presets").iterdir():
        if preset.name.endswith(".yaml"):
            named = datasets & set(keys(yaml.safe_load(preset.read_text())))
            assert not named, f"{preset.name} names datasets {named}"


def test_list_benchmarks_shows_adversaries_and_targets(capsys):
    assert main(["list", "benchmarks"]) == 0
    out = capsys.readouterr().out
    assert "reid_market1501" in out and "attributes gender" in out and "adversaries attribute_inference, denoise" in out
    assert "fewshot_omniglot" in out and "adversaries none (utility only)" in out
    assert "preset tasks/presets/fewshot_folder.yaml" in out
    shown = re.split(r"\n  (?=\S)", out)  # one block per benchmark
    mixed = {block.split()[0] for block in shown if "precisions fp32, bf16 (--precision)" in block}
    assert {"fewshot_celeba", "reid_market1501", "classify_imagenet_obf_obf", "transfer_imagenet_cifar10"} <= mixed
    assert "dp_vit_cifar10" not in mixed


def test_task_classes_made_for_benchmarks_are_tasks():
    for name in registry.benchmarks.list():
        assert issubclass(registry.tasks.get(name), Task)
