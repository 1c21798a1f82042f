"""``bench grid`` end to end: kill -9 and resume, failing cells, executors, the smoke suite.

Cells are the smoke suite's seed-0 identity and pixelate cells (as in the leaderboard and
submit tests) and share the session's cache, where everything a cell trains is kept by
content key: a cell computed by one test costs another test only its evaluation.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from fixtures.smoke_cells import CHEAP_TASK

from bench.cli import main
from bench.core.registry import scoped

ROOT = Path(__file__).resolve().parents[2]
BENCH = [sys.executable, "-m", "bench"]
TASK = "fewshot_synth_faces"


def write_suite(path: Path, mechanisms: list[dict], seeds=(0,), attacks=None) -> Path:
    data = {"description": "test", "profile": "smoke", "seeds": list(seeds), "benchmarks": [TASK],
            "mechanisms": mechanisms}
    if attacks is not None:
        data["attacks"] = list(attacks)
    path.write_text(yaml.safe_dump(data))
    return path


def client(results: Path):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=f"sqlite:///{results.resolve() / 'mlflow.db'}")


def runs_by_key(results: Path, status: str = "FINISHED") -> dict[str, list[str]]:
    """Cell key -> run ids with that status (empty before the database exists)."""
    if not (results / "mlflow.db").exists():
        return {}
    c = client(results)
    experiment = c.get_experiment_by_name("privbench")
    if experiment is None:
        return {}
    out: dict[str, list[str]] = {}
    for run in c.search_runs([experiment.experiment_id], filter_string=f"attributes.status = '{status}'"):
        out.setdefault(run.data.tags["bench.cell_key"], []).append(run.info.run_id)
    return out


def finished_count(results: Path) -> int:
    """FINISHED runs, read with plain sqlite (MLflow may still be creating its schema)."""
    import sqlite3

    database = results / "mlflow.db"
    if not database.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=1) as connection:
            return connection.execute("SELECT count(*) FROM runs WHERE status = 'FINISHED'").fetchone()[0]
    except sqlite3.Error:
        return 0


def grid_argv(suite: Path, results: Path, cache: Path, *extra: str) -> list[str]:
    return ["grid", "--suite", str(suite), "--results-dir", str(results), "--cache-dir", str(cache), *extra]


def summary_counts(text: str) -> dict[str, int]:
    match = re.search(r"grid: (\d+) cells: (\d+) done, (\d+) skipped \(already finished\), (\d+) failed", text)
    assert match, text
    return dict(zip(("cells", "done", "skipped", "failed"), map(int, match.groups())))


def cell_keys(capsys, argv: list[str]) -> list[str]:
    assert main([*argv, "--dry-run"]) == 0
    out = capsys.readouterr().out
    return [line.split()[0] for line in out.strip().splitlines()[:-1]]


def smoke_argv(results: Path, cache: Path, mechanisms: str, *extra: str) -> list[str]:
    return ["grid", "--suite", "smoke", "--seeds", "0", "--mechanism", mechanisms, "--results-dir", str(results),
            "--cache-dir", str(cache), *extra]


def test_killed_grid_resumes_without_losing_or_duplicating_cells(capsys, tmp_path, shared_cache):
    results = tmp_path / "results"
    argv = smoke_argv(results, shared_cache, "identity,pixelate", "--attacks", "none", *CHEAP_TASK)
    keys = cell_keys(capsys, argv)
    assert len(keys) == 3

    log = (tmp_path / "first.log").open("w")
    proc = subprocess.Popen([*BENCH, *argv], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while not finished_count(results):
            assert proc.poll() is None, (tmp_path / "first.log").read_text()
            assert time.monotonic() < deadline, "no cell finished in 10 minutes"
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    before = runs_by_key(results)
    assert 1 <= len(before) < len(keys), "the grid was not killed mid-way"

    assert main(argv) == 0
    counts = summary_counts(capsys.readouterr().out)
    assert counts == {"cells": 3, "done": 3 - len(before), "skipped": len(before), "failed": 0}
    after = runs_by_key(results)
    assert sorted(after) == sorted(keys)
    assert all(len(ids) == 1 for ids in after.values()), after
    assert all(after[key] == ids for key, ids in before.items()), "a finished cell was recomputed"

    assert main(argv) == 0
    assert summary_counts(capsys.readouterr().out) == {"cells": 3, "done": 0, "skipped": 3, "failed": 0}


FLAKY = textwrap.dedent('''
    from bench.errors import BenchError
    from bench.core.interfaces import Mechanism, Param, ParamSpace
    from bench.core.registry import register_mechanism


    @register_mechanism("flaky_{tag}")
    class Flaky(Mechanism):
        params = ParamSpace(fail=Param(int, 0, low=0, high=1))

        def apply(self, images, *, generator, boxes=None):
            if self.config["fail"]:
                raise RuntimeError("boom in apply")
            return images.clone()
''')


def test_failing_cell_is_recorded_and_the_grid_goes_on(capsys, tmp_path, shared_cache):
    plugin = tmp_path / "flaky.py"
    plugin.write_text(FLAKY.format(tag="grid"))
    suite = write_suite(tmp_path / "flaky.yaml", [{"name": "flaky_grid", "grid": {"fail": 1}},
                                                  {"name": "pixelate", "grid": {"block": 4}}], attacks=None)
    results = tmp_path / "results"
    argv = grid_argv(suite, results, shared_cache, "--mechanism-file", str(plugin))
    with scoped():
        assert main(argv) == 1
        out = capsys.readouterr().out
        assert summary_counts(out) == {"cells": 2, "done": 1, "skipped": 0, "failed": 1}
        assert "failed: fewshot_synth_faces flaky_grid(fail=1) seed 0: RuntimeError: boom in apply" in out
        failed = runs_by_key(results, "FAILED")
        assert len(failed) == 1
        run = client(results).get_run(next(iter(failed.values()))[0])
        assert "boom in apply" in run.data.tags["bench.error"]
        assert main(argv) == 1
        assert summary_counts(capsys.readouterr().out) == {"cells": 2, "done": 0, "skipped": 1, "failed": 1}


@pytest.mark.slow
def test_processes_executor_runs_cells_in_two_workers(capsys, tmp_path, shared_cache):
    results = tmp_path / "results"
    argv = smoke_argv(results, shared_cache, "identity,pixelate", "--executor", "processes", "--workers", "2")
    assert main(argv) == 0
    assert summary_counts(capsys.readouterr().out) == {"cells": 3, "done": 3, "skipped": 0, "failed": 0}
    finished = runs_by_key(results)
    assert len(finished) == 3 and all(len(v) == 1 for v in finished.values())
    devices = {client(results).get_run(ids[0]).data.tags["bench.device"] for ids in finished.values()}
    assert devices == {"cpu"}


@pytest.mark.slow
def test_ray_executor_on_a_local_cluster(capsys, tmp_path, shared_cache):
    pytest.importorskip("ray", reason="the ray executor needs ray (pip install 'ray>=2.9')")
    results = tmp_path / "results"
    argv = smoke_argv(results, shared_cache, "identity,pixelate", "--executor", "ray", "--workers", "2")
    assert main(argv) == 0
    assert summary_counts(capsys.readouterr().out) == {"cells": 3, "done": 3, "skipped": 0, "failed": 0}
    assert main(argv) == 0
    assert summary_counts(capsys.readouterr().out) == {"cells": 3, "done": 0, "skipped": 3, "failed": 0}
    assert all(len(v) == 1 for v in runs_by_key(results).values())


@pytest.mark.slow
def test_smoke_suite_runs_at_least_12_cells_and_a_rerun_starts_none(tmp_path, shared_cache):
    results = tmp_path / "results"
    argv = [*BENCH, "grid", "--suite", "smoke", "--results-dir", str(results), "--cache-dir", str(shared_cache)]
    first = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert first.returncode == 0, first.stderr[-3000:]
    counts = summary_counts(first.stdout)
    assert counts["cells"] >= 12 and counts["done"] == counts["cells"] and counts["failed"] == 0
    again = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0
    assert summary_counts(again.stdout) == {**counts, "done": 0, "skipped": counts["cells"]}
    assert "0 to run" in again.stderr
