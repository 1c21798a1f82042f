"""classify_folder / classify_hf / transfer_folder end to end (smoke) on tiny generated labelled data."""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.cli import main
from tests.fixtures.image_folders import png_bytes
from tests.unit.test_labelled_data import write_classes


def bench(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def cell(tmp, task: str, mechanism: str, *extra: str) -> dict:
    code, out, err = bench("run", "--task", task, "--mechanism", mechanism, "--profile", "smoke", "--device", "cpu",
                           "--results-dir", str(tmp / "results"), "--cache-dir", str(tmp / "cache"), *extra)
    assert code == 0, err[-3000:]
    run_id = next(line for line in out.splitlines() if line.startswith("logged: MLflow run ")).split()[3]
    code, raw, shown = bench("show", run_id, "--json", "--results-dir", str(tmp / "results"))
    assert code == 0, shown
    return json.loads(raw) | {"_printed": out + err}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    base = tmp_path_factory.mktemp("labelled")
    return base, write_classes(base / "objects", classes=3, per_class=8, side=16)


DATA = ("--set", "task.data.size=16", "--set", "task.input_size=16")


def test_a_folder_is_classified_and_its_split_rule_recorded(tiny):
    base, root = tiny
    obf = cell(base, "classify_folder_obf_obf", "pixelate", "--param", "block=4", "--set", f"task.data.root={root}",
               *DATA, "-v")
    assert obf["primary_metric"] == "top5" and 0.0 <= obf["utility"]["top1"] <= 1.0
    assert obf["dataset"] == "labelled_folder"
    assert "labelled_folder split: stratified by class, seed 0, fractions 0.7, 0.1, 0.2" in obf["_printed"]


@pytest.mark.slow
def test_the_protocols_share_the_original_model(tiny):
    base, root = tiny
    obf = cell(base, "classify_folder_obf_obf", "pixelate", "--param", "block=4", "--set", f"task.data.root={root}",
               *DATA)
    orig = cell(base, "classify_folder_orig_obf", "pixelate", "--param", "block=4", "--set", f"task.data.root={root}",
                *DATA)
    assert obf["utility"]["top1_original"] == orig["utility"]["top1_original"]  # one original model, shared


@pytest.mark.slow
def test_a_local_parquet_dataset_is_classified(tmp_path):
    rng = np.random.default_rng(0)
    names = [f"kind{c}" for c in range(3) for _ in range(8)]
    cells = [png_bytes(tuple(int(v) for v in rng.integers(0, 256, 3)), size=(16, 16)) for _ in names]
    pq.write_table(pa.table({"img": cells, "kind": names}), tmp_path / "all.parquet")
    result = cell(tmp_path, "classify_hf_obf_orig", "blur", "--set", f"task.data.path={tmp_path / 'all.parquet'}",
                  "--set", "task.data.image_column=img", "--set", "task.data.label_column=kind",
                  *DATA)
    assert set(result["utility"]) >= {"top5", "top1", "top1_drop", "map"}


@pytest.mark.slow
def test_transfer_from_a_folder_to_the_default_target(tiny):
    base, root = tiny
    result = cell(base, "transfer_folder_synth_objects", "pixelate", "--param", "block=4",
                  "--set", f"task.data.root={root}", *DATA,
                  "--set", "task.target_data.synth_objects.n_train=40",
                  "--set", "task.target_data.synth_objects.n_val=10",
                  "--set", "task.target_data.synth_objects.n_test=20")
    assert result["primary_metric"] == "transfer"
    assert set(result["utility"]) >= {"transfer", "transfer_original", "transfer_diff", "source_top1"}


def test_a_missing_folder_is_one_line_and_exit_2_before_any_work(tmp_path):
    code, out, err = bench("run", "--task", "classify_folder_obf_obf", "--mechanism", "pixelate", "--profile", "smoke",
                           "--set", f"task.data.root={tmp_path / 'nope'}", "--results-dir", str(tmp_path / "r"))
    assert code == 2 and "does not exist" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").rglob("result.json"))


@pytest.mark.parametrize("extra, fragment", [
    ((), "has no attribute to infer on labelled_folder"),
    (("--set", "attribute_inference.attributes=gender"), "which the labelled_folder data does not label"),
])
def test_an_attribute_adversary_on_a_folder_without_attributes_is_refused_before_any_work(tiny, tmp_path, extra,
                                                                                         fragment):
    """Issue 57: it failed after the task had trained (30 minutes on a real folder); now the plan refuses it."""
    _, root = tiny
    code, out, err = bench("run", "--task", "classify_folder_obf_obf", "--mechanism", "pixelate", "--profile", "smoke",
                           "--set", f"task.data.root={root}", *DATA, "--attacks", "attribute_inference", *extra,
                           "--results-dir", str(tmp_path / "r"), "--cache-dir", str(tmp_path / "c"))
    assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "r").exists() and not (tmp_path / "c").exists()
