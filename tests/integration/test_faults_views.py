"""Issue 57, views that disagree: every view reads one verified view of a run, and says which run it skips and why.

Before: with the tags table dropped, ``bench runs`` listed the runs FINISHED, ``bench show``
blamed "logged before PrivBench recorded result digests", ``report`` and ``leaderboard
build`` said "no finished cells" and ``bench run`` computed the cell again without a word;
with an edited result.json, ``report`` and ``build`` said "no finished cells" without why.
Now a dropped table is a damaged store for every reader; runs whose tags were deleted, or
whose result.json changed, are named with why by ``runs``, ``show``, ``report`` and the
boards (in their one error line when nothing is left), and ``bench run`` says why it
computes such a cell again, superseding the run.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from urllib.parse import urlparse

import pytest
from fixtures.smoke_cells import CHEAP_TASK

from bench.storage.tracking import SUPERSEDED, Tracker
from bench.storage.tracking.relocate import relocate
from tests.integration.test_bad_inputs import run_cli
from tests.integration.test_faults_store import made_up

CHEAP = ["--task", "fewshot_synth_faces", "--mechanism", "pixelate", "--param", "block=8", "--profile", "smoke",
         "--seed", "0", "--attacks", "none", *CHEAP_TASK]
BOARDS = [["report"], ["leaderboard", "show", "--no-entries"], ["leaderboard", "build", "--no-entries"]]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Two FINISHED runs of made-up cells ``0abc`` and ``1abc``; each test damages its own copy."""
    results = tmp_path_factory.mktemp("views") / "results"
    tracker = Tracker(results)
    return results, [tracker.log_cell(made_up(f"{seed}abc", seed), {"run": {"overrides": {}}}, {}) for seed in (0, 1)]


def copy_of(store, tmp_path: Path, sql: str = "") -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(store[0], copy)
    relocate(copy)
    if sql:
        with sqlite3.connect(copy / "mlflow.db") as db:
            db.executescript(sql)
    return copy


def one_line(code: int, err: str) -> str:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, (code, err)
    return lines[0]


def result_file(results: Path, run_id: str) -> Path:
    run = Tracker(results, create=False).client.get_run(run_id)
    return Path(urlparse(run.info.artifact_uri).path) / "result.json"


def test_a_dropped_tags_table_is_a_damaged_store_to_every_view(store, tmp_path):
    results = copy_of(store, tmp_path, "DROP TABLE tags;")
    before = (results / "mlflow.db").read_bytes()
    for argv in [["runs"], ["show", store[1][0]], *BOARDS, ["run", *CHEAP]]:
        code, out, err = run_cli([*argv, "--results-dir", str(results)])
        line = one_line(code, err)
        assert line.startswith("bench: error: the tracking store is damaged: ") and "its tags table is missing" in line
        assert out == "", argv
    assert (results / "mlflow.db").read_bytes() == before  # MLflow did not create the table again, empty


def test_runs_that_lost_their_tags_are_named_with_why_by_every_view(store, tmp_path):
    results = copy_of(store, tmp_path, "DELETE FROM tags;")
    code, out, err = run_cli(["runs", "--results-dir", str(results)])
    assert code == 0 and [row.split()[1] for row in out.splitlines()[1:]] == ["UNVERIFIED"] * 2, out
    assert err.count("its tags are gone from the tracking database") == 2, err
    line = one_line(*run_cli(["show", store[1][0], "--results-dir", str(results)])[::2])
    assert f"run {store[1][0]}'s result.json cannot be verified (its tags are gone" in line
    assert "logged before PrivBench recorded result digests" not in line
    for argv in BOARDS:
        line = one_line(*run_cli([*argv, "--results-dir", str(results)])[::2])
        assert "no finished cells in" in line and "2 FINISHED run(s) lost their tags in the tracking database" in line
        assert all(f"run {run_id[:12]}" in line for run_id in store[1]), line


def test_an_edited_result_is_named_where_it_is_left_out(store, tmp_path):
    results = copy_of(store, tmp_path)
    edited, kept = store[1]
    path = result_file(results, edited)
    path.write_text(path.read_text().replace('"acc": 0.5', '"acc": 0.99'))
    code, out, err = run_cli(["report", "--results-dir", str(results)])
    assert code == 0 and "0.99" not in out
    (warning,) = [line for line in err.splitlines() if "does not match the digest" in line]
    assert f"left out: run {edited[:12]} (cell 0abc)" in warning and kept[:12] not in warning
    path = result_file(results, kept)
    path.write_text(path.read_text().replace('"acc": 0.5', '"acc": 0.99'))
    for argv in BOARDS:
        line = one_line(*run_cli([*argv, "--results-dir", str(results)])[::2])
        assert "2 FINISHED run(s) have a result.json that does not match the digest logged with it" in line
        assert f"run {edited[:12]} (cell 0abc)" in line and f"run {kept[:12]} (cell 1abc)" in line


def test_bench_run_says_why_it_computes_again_a_cell_whose_run_lost_its_tags(tmp_path, shared_cache):
    results = tmp_path / "results"
    argv = ["run", *CHEAP, "--results-dir", str(results), "--cache-dir", str(shared_cache)]
    assert run_cli(argv)[0] == 0
    tracker = Tracker(results, create=False)
    (first,) = tracker.client.search_runs([tracker.experiment_id])
    key = first.data.tags["bench.cell_key"]
    with sqlite3.connect(results / "mlflow.db") as db:
        db.execute("DELETE FROM tags WHERE run_uuid = ?", (first.info.run_id,))
    code, out, err = run_cli(argv)
    assert code == 0, err
    assert (f"run {first.info.run_id}'s result.json cannot be verified (its tags are gone from the tracking database: "
            f"no cell key, no result digest); computing the cell again (run {first.info.run_id} is superseded)") in err
    (current,) = tracker.finished_runs(key)
    assert current != first.info.run_id
    assert tracker.client.get_run(first.info.run_id).data.tags[SUPERSEDED] == current
    code, out, err = run_cli(["report", "--results-dir", str(results)])
    assert code == 0 and "lost their tags" not in err and "1 run(s) superseded" in err
