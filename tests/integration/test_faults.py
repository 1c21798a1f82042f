"""Fault injection, part 2: damaged caches, concurrent runs and kills never give a wrong FINISHED cell.

Every case ends either in a one-line error or in a FINISHED cell whose numbers equal those
of an undisturbed run of the same cell.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fixtures.smoke_cells import CHEAP_TASK

import bench.storage.cache as cache_module
from bench.cli import main
from bench.storage.tracking import Tracker

ROOT = Path(__file__).resolve().parents[2]
CELL = ["--mechanism", "pixelate", "--param", "block=4", "--task", "fewshot_synth_faces", "--profile", "smoke",
        "--attacks", "face_reid", *CHEAP_TASK]


def bench_run(results: Path, cache: Path, *extra: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    cache_module._verified.clear()  # as a new process: every entry is verified again
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["run", *CELL, "--results-dir", str(results), "--cache-dir", str(cache), *extra])
    return code, out.getvalue(), err.getvalue()


def _is_timing(metric: str) -> bool:
    """Wall-clock seconds (``runtime_s``, ``runtime.<stage>``): the only numbers two runs of a cell may differ in."""
    return metric == "runtime_s" or metric.startswith("runtime.")


def metrics(results: Path) -> dict[str, float]:
    tracker = Tracker(results, create=False)
    runs = tracker.client.search_runs([tracker.experiment_id], filter_string="attributes.status = 'FINISHED'")
    assert len(runs) == 1, f"{len(runs)} FINISHED runs"
    return {k: v for k, v in runs[0].data.metrics.items() if not _is_timing(k)}


def statuses(results: Path) -> list[str]:
    tracker = Tracker(results, create=False)
    return sorted(r.info.status for r in tracker.client.search_runs([tracker.experiment_id]))


@pytest.fixture(scope="module", autouse=True)
def fresh_process_threads():
    """Runs this module's in-process cells with the intra-op threads a fresh ``bench run`` process uses.

    Tests compare numbers computed here with those of spawned processes, and float sums
    depend on how many threads share them; tests before these in one worker may have
    changed torch's thread count (a grid slot, a Ray worker in this process).
    """
    import torch

    code = "from bench.system.cpus import fit_torch_threads; print(fit_torch_threads())"
    fresh = int(subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                               check=True).stdout.split()[-1])
    before = torch.get_num_threads()
    torch.set_num_threads(fresh)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> tuple[Path, dict[str, float]]:
    """One undisturbed run of the cell: its cache and its metrics."""
    root = tmp_path_factory.mktemp("clean")
    code, _, err = bench_run(root / "results", root / "cache")
    assert code == 0, err[-3000:]
    return root / "cache", metrics(root / "results")


@pytest.mark.parametrize("kind", ["releases", "models", "datasets/synth_faces"])
def test_a_flipped_byte_is_one_warning_and_a_recomputed_cell_with_the_same_numbers(tmp_path, clean, kind):
    cache, expected = clean
    shutil.copytree(cache, tmp_path / "cache")
    payloads = [f for f in sorted((tmp_path / "cache" / kind).glob("*/**/*")) if f.is_file() and f.name != "MANIFEST.json"]
    assert payloads, f"no {kind} entry"
    victim = max(payloads, key=lambda f: f.stat().st_size)  # a release's biggest file is an image shard
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x10
    victim.write_bytes(bytes(data))
    code, out, err = bench_run(tmp_path / "results", tmp_path / "cache")
    assert code == 0, err[-3000:]
    warnings = [line for line in err.splitlines() if "is damaged" in line]
    assert len(warnings) == 1 and "checksum mismatch" in warnings[0] and kind in warnings[0]
    assert metrics(tmp_path / "results") == expected


def test_a_truncated_model_is_rebuilt_not_a_traceback(tmp_path, clean):
    cache, expected = clean
    shutil.copytree(cache, tmp_path / "cache")
    for entry in (tmp_path / "cache" / "models").glob("*/object.pt"):
        entry.write_bytes(entry.read_bytes()[:100])
    code, _, err = bench_run(tmp_path / "results", tmp_path / "cache")
    assert code == 0 and "Traceback" not in err
    assert metrics(tmp_path / "results") == expected


def test_a_second_run_reports_the_finished_cell_and_force_supersedes_it(tmp_path, clean):
    cache, expected = clean
    shutil.copytree(cache, tmp_path / "cache")
    assert bench_run(tmp_path / "results", tmp_path / "cache")[0] == 0
    code, out, err = bench_run(tmp_path / "results", tmp_path / "cache")
    assert code == 0 and "already has a FINISHED run" in err and "privacy_score" in out
    assert statuses(tmp_path / "results") == ["FINISHED"]
    code, _, _ = bench_run(tmp_path / "results", tmp_path / "cache", "--force")
    assert code == 0
    tracker = Tracker(tmp_path / "results", create=False)
    runs = tracker.client.search_runs([tracker.experiment_id])
    superseded = [r for r in runs if "bench.superseded_by" in r.data.tags]
    assert len(runs) == 2 and len(superseded) == 1
    assert metrics_of_current(tracker) == expected


def test_an_edited_result_is_not_reported_but_computed_again(tmp_path, clean):
    cache, expected = clean
    shutil.copytree(cache, tmp_path / "cache")
    assert bench_run(tmp_path / "results", tmp_path / "cache")[0] == 0
    (path,) = (tmp_path / "results" / "artifacts").rglob("result.json")
    result = json.loads(path.read_text())
    result["utility"]["acc"] = 0.999
    path.write_text(json.dumps(result))
    code, out, err = bench_run(tmp_path / "results", tmp_path / "cache")
    assert code == 0 and "already has a FINISHED run" not in err and "0.9990" not in out
    (warning,) = [line for line in err.splitlines() if "does not match the digest" in line]
    assert "computing the cell again" in warning
    tracker = Tracker(tmp_path / "results", create=False)
    assert metrics_of_current(tracker) == expected


def metrics_of_current(tracker: Tracker) -> dict[str, float]:
    (run_id,) = tracker.finished_runs(tracker.client.search_runs([tracker.experiment_id])[0].data.tags["bench.cell_key"])
    return {k: v for k, v in tracker.client.get_run(run_id).data.metrics.items() if not _is_timing(k)}


def spawn(results: Path, cache: Path, prelude: str = "") -> subprocess.Popen:
    argv = ["run", *CELL, "--results-dir", str(results), "--cache-dir", str(cache), "-v"]
    code = f"{prelude}\nimport sys\nfrom bench.cli import main\nsys.exit(main({argv!r}))\n"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_two_concurrent_runs_of_one_cell_compute_it_once(tmp_path, clean):
    cache, expected = clean
    shutil.copytree(cache, tmp_path / "cache")
    shutil.rmtree(tmp_path / "cache" / "models")  # make the computation take a while
    procs = [spawn(tmp_path / "results", tmp_path / "cache") for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    reported = sum("already has a FINISHED run" in err for _, err in outs)
    computed = sum("training" in err for _, err in outs)
    assert reported == 1 and computed == 1
    assert statuses(tmp_path / "results") == ["FINISHED"]
    assert metrics(tmp_path / "results") == expected


def wait_for(proc: subprocess.Popen, phrase: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    for line in proc.stderr:
        if phrase in line:
            return
        assert time.monotonic() < deadline, f"no {phrase!r} within {timeout} s"
    raise AssertionError(f"process ended before {phrase!r}: exit {proc.wait()}")


PAUSE_WHILE_LOGGING = """
import sys, time
import bench.storage.tracking as tracking
real = tracking.Tracker.finish_cell
def finish_slowly(self, run_id, result, configs, artifacts, curves=None):
    from mlflow.entities import Metric
    self.client.log_batch(run_id, metrics=[Metric("half_logged", 1.0, 0, 0)])
    print("[test] logging", file=sys.stderr, flush=True)
    time.sleep(600)
tracking.Tracker.finish_cell = finish_slowly
"""


@pytest.mark.parametrize("moment, prelude, phrase", [
    ("compute", "", "training the"),
    ("logging", PAUSE_WHILE_LOGGING, "[test] logging"),
])
def test_a_kill_9_leaves_an_orphan_that_the_next_run_fails_and_recomputes(tmp_path, clean, moment, prelude, phrase):
    cache, expected = clean
    shutil.copytree(cache, tmp_path / "cache")
    shutil.rmtree(tmp_path / "cache" / "models")
    proc = spawn(tmp_path / "results", tmp_path / "cache", prelude)
    try:
        wait_for(proc, phrase)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    assert statuses(tmp_path / "results") == ["RUNNING"]
    code, _, err = bench_run(tmp_path / "results", tmp_path / "cache", "-v")
    assert code == 0, err[-3000:]
    assert "left by a killed process FAILED" in err
    assert statuses(tmp_path / "results") == ["FAILED", "FINISHED"]
    tracker = Tracker(tmp_path / "results", create=False)
    (failed,) = tracker.client.search_runs([tracker.experiment_id], filter_string="attributes.status = 'FAILED'")
    assert "orphaned" in failed.data.tags["bench.error"]
    assert metrics(tmp_path / "results") == expected


@pytest.mark.slow
def test_a_bad_tracking_uri_fails_fast_before_any_work(tmp_path):
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "bench", "run", *CELL, "--results-dir", str(tmp_path / "r"),
                           "--tracking-uri", "http://127.0.0.1:9"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    elapsed = time.monotonic() - started
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert elapsed < 5 + _import_seconds(), f"{elapsed:.1f} s"
    assert not (tmp_path / "r").exists()


def _import_seconds() -> float:
    """The interpreter's start-up and imports, which the 5 s budget does not count."""
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", "import bench.cli, bench.cell.run, mlflow.tracking"], cwd=ROOT, check=True)
    return time.monotonic() - started


def test_result_json_of_a_cell_is_real_json(tmp_path, clean):
    cache, _ = clean
    shutil.copytree(cache, tmp_path / "cache")
    assert bench_run(tmp_path / "results", tmp_path / "cache")[0] == 0
    (config,) = (tmp_path / "results" / "artifacts").rglob("config.json")
    run = json.loads(config.read_text())["run"]
    assert run["params"] == {"block": "4"} and run["data_root"] is None and run["seed"] == 0
