"""The Python API as a notebook uses it: bench.run, then bench.results and bench.leaderboard as DataFrames."""

from __future__ import annotations

import pytest
import torch

import bench
import bench.storage.tracking
from bench.cell.provenance import cpu_model, hardware
from bench.errors import BenchError


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    results = tmp_path_factory.mktemp("api") / "results"
    result = bench.run(mechanism="pixelate", task="fewshot_synth_faces", params={"block": 4}, seed=0, profile="smoke",
                       attacks=["face_reid"], settings={"task.epochs": 1}, results_dir=results)
    return results, result


def test_run_then_results_gives_the_printed_row(ran):
    results, result = ran
    table = bench.results(results)
    assert len(table) == 1
    row = table.iloc[0]
    assert row["cell_key"] == result.cell_key and row["schema"] == result.schema
    assert row["mechanism"] == "pixelate" and row["param.block"] == 4 and row["seed"] == 0
    assert row["utility.acc"] == pytest.approx(result.utility["acc"])
    assert row["attack.face_reid.top1"] == pytest.approx(result.attacks["face_reid"]["top1"])
    if result.privacy_score is not None:
        assert row["privacy_score"] == pytest.approx(result.privacy_score)
    assert row["claim.epsilon"] is None and row["training_claim.epsilon"] is None
    assert '"epochs"' in row["settings"]


def test_a_second_run_is_the_finished_cell(ran):
    results, result = ran
    again = bench.run(mechanism="pixelate", task="fewshot_synth_faces", params={"block": 4}, seed=0, profile="smoke",
                      attacks=["face_reid"], settings={"task": {"epochs": 1}}, results_dir=results)
    assert again.cell_key == result.cell_key and again.utility == result.utility
    assert len(bench.results(results)) == 1


def test_filters_select_rows_and_refuse_unknown_columns(ran):
    results, _ = ran
    assert len(bench.results(results, mechanism="pixelate", seed=[0, 1])) == 1
    assert len(bench.results(results, mechanism="dp_pix")) == 0
    with pytest.raises(BenchError, match="no column 'mechnism'"):
        bench.results(results, mechnism="pixelate")


def test_leaderboard_is_a_dataframe_of_standings(ran):
    results, _ = ran
    board = bench.leaderboard(results, suites=[])
    assert {"board", "benchmark", "entry", "rank", "hv_mean", "status"} <= set(board.columns)


def test_user_errors_are_bench_errors_before_any_work(tmp_path):
    with pytest.raises(BenchError, match="did you mean"):
        bench.run(mechanism="pixelat", task="fewshot_synth_faces", profile="smoke", results_dir=tmp_path / "r")
    with pytest.raises(BenchError, match="needs a section"):
        bench.run(mechanism="pixelate", task="fewshot_synth_faces", profile="smoke", settings={"epochs": 1},
                  results_dir=tmp_path / "r")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("fmt, marker", [("markdown", "| pixelate | block=4 | 1 |"), ("latex", r"\begin{tabular}"),
                                          ("csv", "benchmark,profile,data,settings")])
def test_report_writes_paper_tables(ran, fmt, marker, tmp_path, capsys):
    from bench.cli import main

    results, result = ran
    assert main(["report", "--results-dir", str(results), "--format", fmt]) == 0
    out = capsys.readouterr().out
    assert marker in out
    if fmt == "csv":  # full precision, not the tables' three decimals
        import io

        import pandas as pd

        assert pd.read_csv(io.StringIO(out))["utility"][0] == pytest.approx(result.utility["acc"], abs=1e-4)
    else:
        assert f"{result.utility['acc']:.3f}" in out
    assert main(["report", "--results-dir", str(results), "--format", fmt, "--out", str(tmp_path / "t.txt")]) == 0
    assert (tmp_path / "t.txt").read_text() == out


def test_report_user_errors_are_one_line(ran, tmp_path, capsys):
    from bench.cli import main

    results, _ = ran
    assert main(["report", "--results-dir", str(results), "--benchmark", "reid_market1501"]) == 2
    assert main(["report", "--results-dir", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "no finished" in err


def test_mlflow_carries_task_and_attack_settings_as_params(ran):
    from bench.storage.tracking import Tracker

    results, result = ran
    tracker = Tracker(results, create=False)
    run = tracker.client.search_runs([tracker.experiment_id])[0]
    params = run.data.params
    assert params["task.epochs"] == "1" and params["param.block"] == "4"  # as bench.results' param.* columns
    assert "attack.face_reid.epochs" in params and "task.data.n_ids" in params
    assert run.info.run_name == "pixelate(block=4) · s0 · fewshot_synth_faces"  # what differs first
    assert run.data.tags["mlflow.source.name"] == "bench" and run.data.tags["mlflow.user"]
    experiment = tracker.client.get_experiment(tracker.experiment_id)
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"  # the classic ML view
    (dataset,) = run.inputs.dataset_inputs
    assert dataset.dataset.name == "synth_faces" and dataset.dataset.digest == result.dataset_fingerprint[:36]
    assert dataset.dataset.source_type == "synthetic"
    # The CPU cell's intra-op threads and CPU model, which its float sums depend on.
    assert run.data.tags["bench.version.cpu_threads"] == result.versions["cpu_threads"] == str(torch.get_num_threads())
    assert run.data.tags["bench.version.cpu"] == result.versions["cpu"] == cpu_model() != "unknown"
    capability = torch.backends.cpu.get_cpu_capability()
    assert run.data.tags["bench.version.cpu_capability"] == result.versions["cpu_capability"] == capability


def test_a_cuda_cell_records_its_gpu_and_no_cpu_facts(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    assert hardware(torch.device("cuda", 0)) == {"gpu": "NVIDIA H100 80GB HBM3"}
    assert set(hardware(torch.device("cpu"))) == {"cpu", "cpu_threads", "cpu_capability"}


def test_a_copied_results_directory_reads_its_own_artifacts_after_relocate(ran, tmp_path, capsys):
    import shutil

    from bench.cli import main

    results, result = ran
    first = tmp_path / "first"
    shutil.copytree(results, first)
    assert main(["relocate", "--results-dir", str(first)]) == 0
    assert "moved from" in capsys.readouterr().out
    moved = tmp_path / "elsewhere" / "results"
    shutil.copytree(first, moved)
    shutil.rmtree(first)  # the folder the store pointed at is gone
    assert len(bench.results(moved)) == 0  # its runs' artifacts cannot be read
    assert "bench relocate --results-dir" in capsys.readouterr().err
    with pytest.raises(BenchError, match="was copied or moved .* before adding runs to it"):
        bench.storage.tracking.Tracker(moved)  # a writer's new runs would have no folder of their own
    assert main(["relocate", "--results-dir", str(moved)]) == 0
    table = bench.results(moved)
    assert len(table) == 1 and table.iloc[0]["utility.acc"] == pytest.approx(result.utility["acc"])
    assert main(["relocate", "--results-dir", str(moved)]) == 0 and "nothing to do" in capsys.readouterr().out
    assert "bench relocate" not in capsys.readouterr().err


@pytest.mark.slow  # MLflow's server starts in 20-30 s; tests/unit/test_ui_cmd.py covers the command on stub servers
def test_bench_ui_serves_a_copied_results_directory_with_its_artifacts(ran, tmp_path):
    import json as jsonlib
    import os
    import shutil
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    results, result = ran
    copy = tmp_path / "copy"
    shutil.copytree(results, copy)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "bench", "ui", "--results-dir", str(copy), "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                              env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"})
    try:
        line = server.stdout.readline()
        assert f"http://127.0.0.1:{port}/#/experiments/" in line and "workflowType=machine_learning" in line
        from bench.storage.tracking import Tracker

        run_id = Tracker(copy, create=False).finished_runs(result.cell_key)[0]
        listing = None
        for _ in range(120):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/2.0/mlflow/artifacts/list?run_id={run_id}",
                                            timeout=5) as answer:
                    listing = jsonlib.loads(answer.read())
                break
            except OSError:
                time.sleep(0.5)
        assert listing is not None, "the MLflow server did not answer"
        assert listing["root_uri"].startswith(copy.resolve().as_uri())
        assert {"result.json", "config.json"} <= {f["path"] for f in listing["files"]}
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)


def test_training_curves_are_step_metrics(ran):
    import math

    import mlflow

    results, result = ran
    client = mlflow.MlflowClient(f"sqlite:///{results / 'mlflow.db'}")
    run_id = bench.results(results).iloc[0]["run_id"]
    keys = sorted(k for k in client.get_run(run_id).data.metrics if k.startswith("curve."))
    assert {"curve.fewshot.clean.loss", "curve.fewshot.clean.val_acc", "curve.face_reid.clean.loss"} <= set(keys)
    for key in keys:
        history = client.get_metric_history(run_id, key)
        assert [m.step for m in history] == list(range(1, len(history) + 1)) and history
        assert all(math.isfinite(m.value) for m in history)
    embedder = client.get_metric_history(run_id, "curve.face_reid.clean.loss")
    assert len(embedder) > 1 and embedder[-1].value < embedder[0].value  # it trained


def test_results_by_demographic_group(ran):
    results, result = ran
    groups = result.groups
    assert groups["min_size"] == 20 and "within each group" in groups["utility"]["note"]
    assert set(groups["utility"]["table"]) == {"gender", "age_group", "skin_tone"}
    assert set(groups["attacks"]["face_reid"]["table"]) == {"gender", "age_group", "skin_tone"}
    table = bench.group_results(results)
    assert set(table["source"]) == {"utility", "face_reid"} and (table["run_id"] == bench.results(results).iloc[0]["run_id"]).all()
    shown = table[table["flag"] != "group too small"]
    assert (shown["n"] >= 20).all() and shown["value"].notna().all()
    hidden = table[table["flag"] == "group too small"]
    assert hidden["value"].isna().all()
    probes = table[(table["source"] == "face_reid") & (table["attribute"] == "gender")]["n"].sum()
    assert probes == result.attacks["face_reid"]["probes"]  # every probe is in one gender group
    assert bench.results(results).iloc[0]["group.worst_privacy"] == pytest.approx(
        groups["worst_privacy"]["privacy"]) if "worst_privacy" in groups else True


def test_report_cells_bundle_round_trip_and_extra_columns(ran, tmp_path, capsys):
    import pandas as pd

    from bench.cli import main

    results, result = ran
    columns = ["--columns", "utility.acc_clean,attack.face_reid.top1,privacy.face_reid"]
    bundle = tmp_path / "cells.json"
    assert main(["report", "--results-dir", str(results), *columns, "--cells", str(bundle)]) == 0
    from_store = capsys.readouterr().out
    assert f"{result.attacks['face_reid']['top1']:.3f}" in from_store and "attack.face\\_reid.top1 (95% CI)" in from_store
    assert main(["report", "--bundle", str(bundle), *columns, "--results-dir", str(tmp_path / "none")]) == 0
    assert capsys.readouterr().out == from_store  # the bundle alone gives the same tables
    for suffix in (".csv", ".parquet"):
        assert main(["report", "--bundle", str(bundle), "--cells", str(tmp_path / f"cells{suffix}")]) == 0
        flat = pd.read_csv(tmp_path / "cells.csv") if suffix == ".csv" else pd.read_parquet(tmp_path / "cells.parquet")
        assert len(flat) == 1 and flat["utility.acc"].iloc[0] == pytest.approx(result.utility["acc"])
    capsys.readouterr()
    for bad, message in ((["--columns", "acc"], "is not utility.METRIC"), (["--cells", str(tmp_path / "x.txt")], ".json, .csv"),
                         (["--bundle", str(tmp_path / "cells.csv")], "not a readable JSON")):
        assert main(["report", "--results-dir", str(results), *bad]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0]
    assert not (tmp_path / "x.txt").exists()


def test_a_run_carries_its_run_id_and_mlflow_only_the_numbers_compared_across_runs(ran):
    import mlflow

    results, result = ran
    assert result.run_id == bench.results(results).iloc[0]["run_id"]
    client = mlflow.MlflowClient(f"sqlite:///{results / 'mlflow.db'}")
    metrics = client.get_run(result.run_id).data.metrics
    scalars = {k for k in metrics if not k.startswith("curve.")}
    assert not any(k.startswith("group.") and k != "group.worst_privacy" for k in scalars)
    assert {"attack.face_reid.top1", "attack.face_reid.top1_clean", "runtime_s"} <= scalars
    assert not {"attack.face_reid.identities", "attack.face_reid.probes", "attack.face_reid.chance"} & scalars
    assert {k for k in scalars if k.startswith("utility.")} == {f"utility.{k}" for k in result.utility}
    assert len(scalars) <= 25, sorted(scalars)
    artifacts = {f.path for f in client.list_artifacts(result.run_id, "tables")}
    assert artifacts == {"tables/groups.json", "tables/attacks.json"}
    attacks, groups = (_table(client, result.run_id, name) for name in ("attacks", "groups"))
    assert {row["metric"] for row in attacks} == set(result.attacks["face_reid"])
    frame = bench.group_results(results)
    logged = sorted((row["source"], row["attribute"], row["group"], row["n"]) for row in groups)
    assert len(groups) > 0 and logged == sorted(zip(frame["source"], frame["attribute"], frame["group"], frame["n"]))


def _table(client, run_id: str, name: str) -> list[dict]:
    """Reads a table artifact as MLflow's log_table wrote it (``columns`` and ``data`` rows)."""
    import json
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        data = json.loads(Path(client.download_artifacts(run_id, f"tables/{name}.json", tmp)).read_text())
    return [dict(zip(data["columns"], row)) for row in data["data"]]


def test_grid_from_python_reuses_the_finished_cell_and_returns_its_row(ran):
    results, result = ran
    table = bench.grid("fewshot_synth_faces", "pixelate", {"block": [4]}, seeds=[0], profile="smoke",
                       attacks=["face_reid"], settings={"task.epochs": 1}, results_dir=results)
    assert list(table["run_id"]) == [result.run_id] and "1 skipped" in table.attrs["summary"], table.attrs["summary"]
    with pytest.raises(BenchError, match="did you mean"):
        bench.grid("fewshot_synth_faces", "pixelat", {"block": [4, 8]}, results_dir=results)
    with pytest.raises(BenchError, match="trials"):
        bench.tune("pixelate", "fewshot_synth_faces", trials=0, results_dir=results)


def test_runs_lists_and_show_takes_a_unique_prefix(ran, capsys):
    from bench.cli import main

    results, result = ran
    listed = bench.runs(results, mechanism="pixelate", status="finished")
    assert list(listed["run_id"]) == [result.run_id] and listed["name"][0].startswith("pixelate(block=4)")
    assert bench.runs(results, mechanism="dp_pix").empty and len(bench.runs(results, since="1d")) == 1
    assert main(["runs", "--results-dir", str(results), "--benchmark", "fewshot_synth_faces"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:3] == ["RUN", "STATUS", "STARTED"] and result.run_id[:12] in out
    assert main(["show", result.run_id[:6], "--json", "--results-dir", str(results)]) == 0
    assert f'"cell_key": "{result.cell_key}"' in capsys.readouterr().out
    assert main(["show", result.cell_key[:8], "--json", "--results-dir", str(results)]) == 0
    capsys.readouterr()
    assert main(["runs", "--results-dir", str(results), "--since", "yesterday"]) == 2
    with pytest.raises(SystemExit) as exc:  # argparse's own usage error: one line, exit 2
        main(["runs", "--results-dir", str(results), "--status", "finnished"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "--since 'yesterday'" in err and "did you mean 'finished'" in err
