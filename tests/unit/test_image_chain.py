"""What happens to image sizes is recorded, and upscaling before the mechanism is reported."""

from __future__ import annotations

import torch

from bench.cell.data import image_chain
from bench.core.registry import tasks
from bench.data.base import ImageSet, Splits, size_report
from tests.fixtures.celeba_fixture import write_celeba


def test_size_report_counts_images_enlarged_to_the_stored_size():
    native = [[218, 178], [28, 23], [400, 300]]
    source = [[176, 176], [23, 23], [300, 300]]
    report = size_report(native, source, (84, 84))
    assert report == {"native": {"min": [28, 23], "median": [218, 178], "max": [400, 300]}, "stored": [84, 84],
                      "upscaled": 1}
    assert size_report([], [], (8, 8))["upscaled"] == 0


def test_the_chain_of_a_synthetic_cell_is_its_stored_size_and_the_task_input():
    images = torch.zeros(4, 3, 64, 64, dtype=torch.uint8)
    splits = Splits("synth_faces", {"test": ImageSet(images, torch.arange(4))}, "fp")
    chain = image_chain(splits, tasks.get("fewshot_synth_faces")("quick"))
    assert chain["stored"] == [64, 64] and chain["task_input"] == [32, 32] and chain["upscaled"] == 0
    assert chain["native"]["median"] == [64, 64] and chain["mechanism_at"] == "stored"


def test_celeba_records_native_sizes_and_small_images_upscaled(tmp_path):
    from bench.data.loaders.celeba import CelebA

    fx = write_celeba(tmp_path / "data", n_ids=4, per_id=3, small_ids=0)
    options = {"min_images": 3, "size": 200, "crop": 176, "split_fractions": (0.5, 0.25, 0.25)}
    splits = CelebA().load(fx.root, options, tmp_path / "cache")
    report = splits.info["images"]
    total = sum(len(s) for s in splits.sets.values())
    assert report["stored"] == [200, 200] and report["upscaled"] == total  # a 176 crop enlarged to 200: every image
    assert "not used" in splits.info["boxes"] and "split_by=official" in splits.info["split"]


def test_the_runner_warns_once_when_images_were_upscaled_before_the_mechanism(tmp_path, capsys):
    import contextlib
    import io

    from bench.cli import main
    from tests.fixtures.celeba_fixture import write_celeba as write

    fx = write(tmp_path / "data", n_ids=10, per_id=6, small_ids=0)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["run", "--mechanism", "identity", "--task", "fewshot_celeba", "--profile", "smoke",
                     "--data-root", str(fx.root), "--set", "task.data.min_images=6", "--set", "task.data.size=200",
                     "--set", "task.data.crop=176", "--set", "task.data.split_fractions=[0.5,0.2,0.3]",
                     "--set", "task.train_shot=2", "--set", "task.train_query=2", "--set", "task.test_shot=2",
                     "--set", "task.test_query=2", "--set", "task.test_way=2", "--set", "task.train_way=2",
                     "--attacks", "none", "--results-dir", str(tmp_path / "results")])
    lines = [line for line in err.getvalue().splitlines() if "upscaled" in line]
    assert code == 0, err.getvalue()[-2000:]
    assert len(lines) == 1 and "upscaled to 200x200 before the mechanism ran" in lines[0]
