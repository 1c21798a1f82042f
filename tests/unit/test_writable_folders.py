"""A results or cache folder that cannot be written is one line before any work, not a traceback mid-cell."""

from __future__ import annotations

import os

import pytest

from bench import runner
from bench.errors import BenchError
from bench.locks import file_lock
from bench.tracking import Tracker


def read_only(*folders):
    """An ``os.access`` that says no to writing in ``folders`` (as a read-only mount does, even for root)."""
    real = os.access
    blocked = {os.path.realpath(f) for f in folders}

    def access(path, mode, *args, **kwargs):
        if mode & os.W_OK and os.path.realpath(path) in blocked:
            return False
        return real(path, mode, *args, **kwargs)

    return access


def test_a_read_only_results_folder_or_its_parent_is_refused_by_the_plan(tmp_path, monkeypatch):
    (tmp_path / "results").mkdir()
    monkeypatch.setattr(os, "access", read_only(tmp_path / "results", tmp_path / "ro"))
    with pytest.raises(BenchError, match="results directory .*results is not writable; pass --results-dir"):
        runner._check_writable("results", tmp_path / "results")
    (tmp_path / "ro").mkdir()
    with pytest.raises(BenchError, match=r"cache directory .*ro is not writable \(nor can .*ro/a/b be created"):
        runner._check_writable("cache", tmp_path / "ro" / "a" / "b")
    runner._check_writable("cache", tmp_path / "elsewhere" / "cache")  # creatable: fine
    (tmp_path / "afile").write_text("x")
    with pytest.raises(BenchError, match="is a file, not a directory"):
        runner._check_writable("results", tmp_path / "afile")


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
