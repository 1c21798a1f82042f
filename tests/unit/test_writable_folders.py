"""A results or cache folder that cannot be written is one line before any work, not a traceback mid-cell."""

from __future__ import annotations

import os

import pytest

from bench.errors import BenchError
from bench.storage.folders import check_writable_folder
from bench.storage.locks import file_lock
from bench.storage.tracking import Tracker


def read_only(*folders):
    """An ``os.access`` that says no to writing in ``folders`` (as a read-only mount does, even for root)."""
    real = os.access
    blocked = {os.path.realpath(f) for f in folders}

    def access(path, mode, *args, **kwargs):
        if mode & os.W_OK and os.path.realpath(path) in blocked:
            return False
        return real(path, mode, *args, **kwargs)

    return access


def test_a_read_only_folder_or_parent_is_refused_and_a_creatable_one_is_not_created(tmp_path, monkeypatch):
    (tmp_path / "results").mkdir()
    (tmp_path / "ro").mkdir()
    monkeypatch.setattr(os, "access", read_only(tmp_path / "results", tmp_path / "ro"))
    with pytest.raises(BenchError, match="--results-dir .*results: .*results is not writable$"):
        check_writable_folder("--results-dir", tmp_path / "results")
    with pytest.raises(BenchError, match=r"--cache-dir .*ro/a/b: .*ro is not writable \(nor can .*ro/a/b be created"):
        check_writable_folder("--cache-dir", tmp_path / "ro" / "a" / "b")
    check_writable_folder("--cache-dir", tmp_path / "elsewhere" / "cache")  # creatable: fine
    assert not (tmp_path / "elsewhere").exists()
    (tmp_path / "afile").write_text("x")
    with pytest.raises(BenchError, match="is a file, not a folder"):
        check_writable_folder("--results-dir", tmp_path / "afile")
    with pytest.raises(BenchError, match="afile is a file, so no folder can be created in it"):
        check_writable_folder("--out", tmp_path / "afile" / "site")


def test_the_plan_checks_both_folders(tmp_path, monkeypatch):
    from bench.cell.plan import RunConfig, plan

    monkeypatch.setattr(os, "access", read_only(tmp_path))
    config = RunConfig(task="fewshot_synth_faces", mechanism="pixelate", params={"block": 4}, profile="smoke",
                       results_dir=tmp_path / "results")
    with pytest.raises(BenchError, match="--results-dir .* is not writable"):
        plan(config)


def test_a_read_only_database_is_refused_to_writers_and_read_by_readers(tmp_path, monkeypatch):
    Tracker(tmp_path)
    monkeypatch.setattr(os, "access", read_only(tmp_path / "mlflow.db"))
    with pytest.raises(BenchError, match="mlflow.db is read-only: new runs cannot be logged"):
        Tracker(tmp_path)
    assert Tracker(tmp_path, create=False).finished_runs("any") == []


def test_a_lock_that_cannot_be_created_is_one_line(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(BenchError, match="cannot take the lock .*afile/cell.lock"):
        with file_lock(tmp_path / "afile" / "cell.lock"):
            pass
