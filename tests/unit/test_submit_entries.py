"""``bench submit --entries``: the entry's folder and file are checked before the conformance suite or any cell runs.

The folder must be one or be creatable; the entry's file may only hold an earlier entry of
the same name (a resubmission replaces it, and says so).
"""

from __future__ import annotations

import json

import pytest
import yaml

from bench.cli import main
from bench.cli.submit_cmd import check_entry_target, entry_path
from bench.errors import BenchError

SUITE = {"description": "small", "profile": "smoke", "seeds": [0, 1, 2], "benchmarks": ["fewshot_synth_faces"],
         "mechanisms": [{"name": "pixelate", "grid": {"block": [8]}}]}


def test_a_missing_folder_is_fine_and_not_created(tmp_path):
    check_entry_target(tmp_path / "a" / "b", "pixelate")
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize("where, fragment", [("file", "is a file, not a folder"),
                                             ("file/sub", "is a file, so no folder can be created in it")])
def test_a_folder_that_cannot_be_is_refused(tmp_path, where, fragment):
    (tmp_path / "file").write_text("mine\n")
    with pytest.raises(BenchError, match=fragment) as exc:
        check_entry_target(tmp_path / where, "pixelate")
    assert str(exc.value).startswith(f"--entries {tmp_path / where}")
    assert (tmp_path / "file").read_text() == "mine\n"


def test_an_earlier_entry_of_the_same_name_is_replaced_and_said_so(tmp_path, capsys):
    path = entry_path(tmp_path, "pixelate")
    path.write_text(json.dumps({"name": "pixelate", "cells": []}))
    check_entry_target(tmp_path, "pixelate")
    assert f"{path} holds an earlier entry named 'pixelate'; it is replaced" in capsys.readouterr().err


@pytest.mark.parametrize("content", ['{"name": "someone else"}', "not json", "[1, 2]", None])
def test_anything_else_in_the_entrys_place_is_left_alone(tmp_path, content):
    path = entry_path(tmp_path, "pixelate")
    if content is None:
        path.mkdir()
    else:
        path.write_text(content)
    with pytest.raises(BenchError, match="exists and is not an entry named 'pixelate'"):
        check_entry_target(tmp_path, "pixelate")
    assert path.is_dir() if content is None else path.read_text() == content


@pytest.mark.parametrize("where", ["file", "file/sub", "taken"])
def test_submit_refuses_an_unusable_entries_location_before_conformance(capsys, monkeypatch, tmp_path, where):
    import bench.cli.submit_cmd as submit_cmd

    monkeypatch.setattr(submit_cmd, "conformance", lambda name: pytest.fail("the conformance suite ran"))
    suite = tmp_path / "small.yaml"
    suite.write_text(yaml.safe_dump(SUITE))
    (tmp_path / "file").write_text("mine\n")
    (tmp_path / "taken").mkdir()
    entry_path(tmp_path / "taken", "pixelate").write_text('{"name": "other"}')
    code = main(["submit", "--mechanism", "pixelate", "--suite", str(suite), "--seeds", "0,1,2",
                 "--results-dir", str(tmp_path / "r"), "--entries", str(tmp_path / where)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("bench: error: --entries") and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "r").exists() and (tmp_path / "file").read_text() == "mine\n"
