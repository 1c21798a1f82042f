"""How cells compute: at bf16 the task's networks train in mixed precision while adversaries and releases do not
change; without PyTorch's fill of new memory the numbers are the same as with it."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
import torch
from fixtures.smoke_cells import CHEAP_TASK

from bench.cell import release as cell_release
from bench.cell.plan import RunConfig, plan
from bench.cell.run import run_cell

TASK_MODELS = {"fewshot_synth_faces": ("fewshot.",), "reid_synth_persons": ("reid.",),
               "classify_synth_scenes_obf_obf": ("classify.",),
               "transfer_synth_scenes_synth_scenes": ("classify.", "transfer.")}
"""Each benchmark's task models, by the prefix of their curves (a transfer cell trains a source classifier too)."""
SETTINGS = {"reid_synth_persons": {"task": {"input_size": [64, 32]}}}
"""The smoke profile's 32x16 reID inputs meet a oneDNN bfloat16 bug on AMX CPUs (bench.system.precision.verify)."""


def _cell(task: str, cache: Path, tmp_path: Path, precision: str):
    config = RunConfig(task=task, mechanism="blur", params={"radius": 2}, profile="smoke", device="cpu",
                       results_dir=tmp_path / "results", cache_dir=cache, precision=precision,
                       overrides=SETTINGS.get(task, {}))
    planned = plan(config)
    return planned.key, run_cell(planned)


@pytest.mark.slow
@pytest.mark.parametrize("task", sorted(TASK_MODELS))
def test_a_bf16_cell_trains_its_task_in_mixed_precision_and_nothing_else(task, tmp_path, shared_cache, monkeypatch):
    def settings():
        return (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32,
                torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory)

    seen, release, callers = [], cell_release.make_release, settings()
    monkeypatch.setattr(cell_release, "make_release",
                        lambda *args, **kwargs: seen.append(settings()) or release(*args, **kwargs))
    key, full = _cell(task, shared_cache, tmp_path, "fp32")
    mixed_key, mixed = _cell(task, shared_cache, tmp_path, "bf16")
    assert mixed_key != key
    assert seen == [(False, False, True, False)] * 2  # fp32 on GPUs too (no TF32), deterministic, no fill of new memory
    assert settings() == callers
    assert full.result.versions["precision"] == "fp32" and mixed.result.versions["precision"] == "bf16"
    for name, split in full.release.splits.sets.items():
        assert torch.equal(split.images, mixed.release.splits[name].images), name
    # Each trained model records its losses per epoch: a task model whose forward pass escaped
    # autocast would repeat its fp32 curve exactly, and an adversary's model must repeat it.
    losses = sorted(name for name in full.curves if name.endswith("loss"))
    assert losses == sorted(name for name in mixed.curves if name.endswith("loss"))
    task_losses = [name for name in losses if name.startswith(TASK_MODELS[task])]
    assert task_losses and all(full.curves[name] != mixed.curves[name] for name in task_losses), task_losses
    assert all(full.curves[name] == mixed.curves[name] for name in losses if name not in task_losses)
    assert mixed.result.attacks == full.result.attacks and mixed.result.privacy == full.result.privacy
    assert mixed.result.utility != full.result.utility


def test_a_bf16_run_is_logged_shown_and_listed_as_bf16_beside_its_fp32_twin(tmp_path, shared_cache, capsys):
    import mlflow

    from bench import api
    from bench.cli import main

    results = tmp_path / "results"
    common = ["run", "--task", "fewshot_synth_faces", "--mechanism", "pixelate", "--param", "block=4", "--profile",
              "smoke", "--device", "cpu", "--attacks", "face_reid", *CHEAP_TASK, "--results-dir", str(results),
              "--cache-dir", str(shared_cache), "-q"]
    assert main(common) == 0
    assert main([*common, "--precision", "bf16"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("bf16 mixed precision") == 1  # the header of the bf16 cell's table only
    frame = api.results(results)
    assert sorted(frame["precision"]) == ["bf16", "fp32"] and frame["cell_key"].nunique() == 2
    mixed = frame[frame["precision"] == "bf16"].iloc[0]
    run = mlflow.MlflowClient(f"sqlite:///{results / 'mlflow.db'}").get_run(mixed["run_id"])
    assert run.data.params["precision"] == "bf16" and run.data.tags["bench.version.precision"] == "bf16"
    assert run.info.run_name.endswith(" · bf16")


FILL_CELLS = {
    "fewshot_synth_faces": ("dp_pix", {"epsilon": 3, "block": 4}),
    "reid_synth_persons": ("pixelate", {"block": 4}),
    "classify_synth_scenes_obf_obf": ("face_blur", {}),
    "dp_vit_synth_objects": ("gaussian_noise", {"sigma": 10}),
    "transfer_synth_scenes_synth_faces": ("blur", {"radius": 2}),
    "classify_synth_scenes_orig_obf": ("face_overlay", {}),
}
"""A smoke cell of every kind of benchmark, each with another mechanism."""


@pytest.mark.slow
@pytest.mark.parametrize("task", sorted(FILL_CELLS))
def test_a_cell_computes_the_same_numbers_whether_or_not_torch_fills_new_memory(task, tmp_path, monkeypatch):
    """Cells run without PyTorch's fill of new memory: no step of a cell may read memory it did not write.

    The same cell runs once with the fill (NaN, or a type's largest value, in every new
    buffer) and once without, each with caches of its own, so that data, release, models and
    attacks are all computed again.
    """
    from bench.storage.tracking.metrics import result_metrics
    from bench.system import precision

    mechanism, params = FILL_CELLS[task]
    reproducible = precision.reproducible
    outputs = []
    for fill in (True, False):
        monkeypatch.setattr(precision, "reproducible", partial(reproducible, fill_new_memory=fill))
        place = tmp_path / str(fill)
        config = RunConfig(task=task, mechanism=mechanism, params=params, profile="smoke", device="cpu",
                           results_dir=place / "results", cache_dir=place / "cache")
        outputs.append(run_cell(plan(config)))
    filled, unfilled = ({k: "nan" if v != v else v for k, v in result_metrics(o.result).items()
                         if not k.startswith("runtime")} for o in outputs)
    assert filled == unfilled
    for name, split in outputs[0].release.splits.sets.items():
        assert torch.equal(split.images, outputs[1].release.splits[name].images), name
