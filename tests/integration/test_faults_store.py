"""Fault suite, the tracking store: its own damage is said as such, in one line, by every reader.

Issue 45 item 5. With ``mlflow.db`` truncated, overwritten, emptied or locked, or its
artifacts deleted, ``bench leaderboard show`` said "no finished cells", a 0-byte database
was taken for a new store (every run silently gone), ``bench relocate`` gave a traceback, a
write lock a traceback after 25 s at the start of a cell, and a deleted ``result.json``
stopped ``bench run`` with "not a PrivBench cell". Now every reader says "the tracking store
is damaged/locked: ..." (exit 2), a busy store is waited on for ``$BENCH_STORE_TIMEOUT``
seconds, and a missing result.json is computed again, superseding its run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest
from fixtures.smoke_cells import CHEAP_TASK

from bench.cli import main
from bench.core.interfaces import Result
from bench.errors import BenchError
from bench.storage.tracking import SUPERSEDED, Tracker
from bench.storage.tracking.health import StoreDamaged, StoreLocked, marker_path
from bench.storage.tracking.relocate import relocate

ROOT = Path(__file__).resolve().parents[2]
TASK = "fewshot_synth_faces"
CHEAP = ["--task", TASK, "--mechanism", "pixelate", "--param", "block=8", "--profile", "smoke", "--seed", "0",
         "--attacks", "none", *CHEAP_TASK]
LOCKER = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN " + sys.argv[2])
print("locked", flush=True)
time.sleep(120)
"""


def made_up(key: str, seed: int) -> Result:
    return Result(
        cell_key=key, task=TASK, dataset="synth_faces", mechanism="pixelate", mechanism_version=1,
        params={"block": 8}, seed=seed, profile="smoke", utility={"acc": 0.5, "acc_ci95": 0.02}, primary_metric="acc",
        attacks={"face_reid": {"top1": 0.2}}, privacy={"face_reid": 0.6}, privacy_score=0.6, claim=None,
        runtime_s=1.0, versions={"torch": "x"}, git_sha="x", dataset_fingerprint="fp-synth", synthetic=True,
        device="cpu", created="2026-01-01T00:00:00+00:00",
    )


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A results directory with two FINISHED cells; each test damages its own copy."""
    results = tmp_path_factory.mktemp("faults_store") / "results"
    tracker = Tracker(results)
    runs = [tracker.log_cell(made_up(f"{seed}abc", seed), {"run": {"overrides": {}}}, {}) for seed in (0, 1)]
    return {"results": results, "runs": runs}


def damaged(store, tmp_path, how: str) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(store["results"], copy)
    relocate(copy)
    database = copy / "mlflow.db"
    size = database.stat().st_size
    if how == "truncated":
        os.truncate(database, size // 2)
    elif how == "overwritten":
        database.write_bytes(os.urandom(size))
    elif how == "pages zeroed":
        with open(database, "r+b") as f:
            f.seek(8192)
            f.write(b"\0" * (size - 8192))
    elif how == "zero bytes":
        database.write_bytes(b"")
    elif how == "artifacts deleted":
        shutil.rmtree(copy / "artifacts")
    return copy


READERS = [
    ["leaderboard", "show", "--no-entries"],
    ["report"],
    ["show", "0abc"],
    ["relocate"],
]


@pytest.mark.parametrize("how", ["truncated", "overwritten", "pages zeroed", "zero bytes"])
def test_a_damaged_database_is_said_as_such_by_every_reader(capsys, store, tmp_path, how):
    results = damaged(store, tmp_path, how)
    before = (results / "mlflow.db").read_bytes()
    for argv in READERS:
        assert main([*argv, "--results-dir", str(results)]) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("bench: error: the tracking store is damaged: "), (argv, err)
    assert (results / "mlflow.db").read_bytes() == before, "a reader wrote into the damaged database"


def test_a_zero_length_database_is_refused_not_taken_for_an_empty_store(capsys, store, tmp_path):
    results = damaged(store, tmp_path, "zero bytes")
    with pytest.raises(StoreDamaged, match=r"the database is empty \(0 bytes\) but artifacts of 2 run\(s\) are in"):
        Tracker(results)  # a writer would have created a new store in it
    assert (results / "mlflow.db").stat().st_size == 0
    shutil.rmtree(results / "artifacts")  # no artifacts left: PrivBench's marker still says a store was here
    assert marker_path(results / "mlflow.db").is_file()
    with pytest.raises(StoreDamaged, match=r"PrivBench created a store there \(\.mlflow\.db\.privbench\)"):
        Tracker(results, create=False)


def test_an_empty_file_where_no_runs_were_expected_is_a_new_store(capsys, tmp_path):
    results = tmp_path / "fresh"
    results.mkdir()
    (results / "mlflow.db").write_bytes(b"")
    assert main(["leaderboard", "show", "--no-entries", "--results-dir", str(results)]) == 2
    assert "no finished cells" in capsys.readouterr().err
    tracker = Tracker(results)
    tracker.log_cell(made_up("fresh", 0), {"run": {"overrides": {}}}, {})
    assert marker_path(results / "mlflow.db").is_file() and len(tracker.finished_runs("fresh")) == 1


def test_deleted_artifacts_are_damage_not_an_empty_board(capsys, store, tmp_path):
    results = damaged(store, tmp_path, "artifacts deleted")
    for argv in (["leaderboard", "show", "--no-entries"], ["report"]):
        assert main([*argv, "--results-dir", str(results)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "the tracking store is damaged" in err[0]
        assert f"{results / 'artifacts'} does not exist" in err[0]
    assert main(["show", store["runs"][0], "--results-dir", str(results)]) == 2
    err = capsys.readouterr().err
    assert "result.json is missing (its artifacts were deleted" in err and "not a PrivBench cell" not in err


def test_one_lost_result_is_a_warning_and_the_rest_is_shown(capsys, store, tmp_path):
    results = damaged(store, tmp_path, "")
    tracker = Tracker(results, create=False)
    artifacts = Path(urlparse(tracker.client.get_run(store["runs"][0]).info.artifact_uri).path)
    (artifacts / "result.json").unlink()
    assert main(["report", "--results-dir", str(results)]) == 0
    captured = capsys.readouterr()
    assert "| pixelate | block=8 | 1 |" in captured.out
    assert ("the tracking store is damaged: 1 FINISHED run(s) lost their result.json (artifacts deleted); left out"
            in captured.err)


def hold_lock(database: Path, mode: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", LOCKER, str(database), mode], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_locked_store_is_waited_on_then_said_in_one_line(capsys, store, tmp_path, monkeypatch):
    results = damaged(store, tmp_path, "")
    monkeypatch.setenv("BENCH_STORE_TIMEOUT", "2")
    tracker = Tracker(results)
    locker = hold_lock(results / "mlflow.db", "IMMEDIATE")  # another writer: readers go on, writes wait
    try:
        started = time.monotonic()
        with pytest.raises(StoreLocked, match=r"the tracking store is locked: .* for 2 s \(\$BENCH_STORE_TIMEOUT"):
            tracker.start_cell("lockedcell", {"task": TASK, "mechanism": "pixelate", "params": {}, "seed": 0,
                                              "profile": "smoke"})
        assert time.monotonic() - started < 15
        assert len(tracker.finished_runs("0abc")) == 1  # reading is not blocked by a writer
    finally:
        locker.kill()
        locker.wait()
    locker = hold_lock(results / "mlflow.db", "EXCLUSIVE")  # nobody may even read
    try:
        assert main(["leaderboard", "show", "--no-entries", "--results-dir", str(results)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("bench: error: the tracking store is locked: ")
        assert main(["relocate", "--results-dir", str(results)]) == 2
        assert "the tracking store is locked" in capsys.readouterr().err
    finally:
        locker.kill()
        locker.wait()
    run_id = tracker.start_cell("lockedcell", {"task": TASK, "mechanism": "pixelate", "params": {}, "seed": 0,
                                               "profile": "smoke"})
    assert tracker.client.get_run(run_id).info.status == "RUNNING"  # free again: the same call goes through


def test_bench_run_on_a_locked_store_stops_in_one_line_before_computing(store, tmp_path, shared_cache):
    results = damaged(store, tmp_path, "")
    locker = hold_lock(results / "mlflow.db", "IMMEDIATE")
    try:
        env = {**os.environ, "BENCH_STORE_TIMEOUT": "2"}
        proc = subprocess.run([sys.executable, "-m", "bench", "run", *CHEAP, "--results-dir", str(results),
                               "--cache-dir", str(shared_cache)], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=600)
    finally:
        locker.kill()
        locker.wait()
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("bench: error: the tracking store is locked: ")


def test_a_deleted_result_json_is_computed_again_superseding_its_run(capsys, tmp_path, shared_cache):
    results = tmp_path / "results"
    argv = ["run", *CHEAP, "--results-dir", str(results), "--cache-dir", str(shared_cache)]
    assert main(argv) == 0
    capsys.readouterr()
    tracker = Tracker(results, create=False)
    runs = tracker.client.search_runs([tracker.experiment_id], filter_string="attributes.status = 'FINISHED'")
    (first,) = runs
    key = first.data.tags["bench.cell_key"]
    (Path(urlparse(first.info.artifact_uri).path) / "result.json").unlink()
    assert main(["show", first.info.run_id, "--results-dir", str(results)]) == 2
    assert "result.json is missing" in capsys.readouterr().err
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert f"result.json is missing (its artifacts were deleted after the run ended); computing the cell again " \
           f"(run {first.info.run_id} is superseded)" in err
    (current,) = tracker.finished_runs(key)
    assert current != first.info.run_id
    assert tracker.client.get_run(first.info.run_id).data.tags[SUPERSEDED] == current
    assert isinstance(tracker.load_result(current), Result)


def test_bad_store_timeout_is_one_line(capsys, store, monkeypatch):
    monkeypatch.setenv("BENCH_STORE_TIMEOUT", "soon")
    assert main(["leaderboard", "show", "--no-entries", "--results-dir", str(store["results"])]) == 2
    err = capsys.readouterr().err
    assert "$BENCH_STORE_TIMEOUT must be a number of seconds" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(BenchError):
        Tracker(store["results"], create=False)


def test_runs_shows_the_verified_result_not_the_database_copy(capsys, store, tmp_path):
    """Issue 57: metrics edited in the database showed in 'bench runs' (0.990) while 'show' said 0.4909."""
    import sqlite3

    copy = tmp_path / "copy"
    shutil.copytree(store["results"], copy)
    relocate(copy)
    with sqlite3.connect(copy / "mlflow.db") as db:
        db.execute("UPDATE metrics SET value = 0.99 WHERE key = 'utility.acc'")
        db.execute("UPDATE latest_metrics SET value = 0.99 WHERE key = 'utility.acc'")
    assert main(["runs", "--results-dir", str(copy)]) == 0
    out, err = capsys.readouterr()
    rows = out.splitlines()[1:]
    assert len(rows) == 2 and all(row.split()[4] == "0.500" for row in rows), out  # result.json's, as show says
    assert "0.990" not in out and not err
    # A run whose result.json no longer matches its digest is UNVERIFIED, without numbers, and says why.
    (result,) = [p for p in (copy / "artifacts").rglob("result.json")][:1]
    result.write_text(result.read_text().replace('"acc": 0.5', '"acc": 0.9'))
    assert main(["runs", "--results-dir", str(copy)]) == 0
    out, err = capsys.readouterr()
    assert sum("UNVERIFIED" in row for row in out.splitlines()[1:]) == 1 and "0.900" not in out
    assert err.startswith("[bench] UNVERIFIED ") and "does not match the digest logged with it" in err
