"""Entries live where the user works (issue 62): ``./leaderboard/entries`` of the current folder, or ``--entries``.

``bench submit`` writes there and never into the installed package's ``leaderboard/entries``;
the boards show the shipped baselines (read only, from the package) beside the user's
entries, once each even from the repository checkout; an entry records no absolute path.
Submit reuses made-up results logged under the suite's real cell keys (as in
tests/integration/test_submit.py), so no cell is computed.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
from pathlib import Path

import pytest
import yaml

from bench.cli import main
from bench.cli.leaderboard_cmd import find_entry
from leaderboard.locations import (
    SHIPPED_DIR,
    entry_folders,
    entry_names_in,
    portable_uri,
    same_folder,
)
from leaderboard.store import load_entry, read_entries
from tests.integration.test_submit import SUITE, log_made_up_cells

ROOT = Path(__file__).resolve().parents[2]
MINE = "my pixelate"
"""The test's entry name: 'pixelate' is a shipped baseline's, which a user's entry may not take beside it."""


def listing(folder: Path) -> list[tuple[str, int, int]]:
    """The files of a folder with their sizes and modification times (to tell any write)."""
    return sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir())


def strings(value):
    """Every string in a JSON value, keys included."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)
    elif isinstance(value, str):
        yield value


def assert_no_absolute_path(path: Path, tmp: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert str(tmp) not in text and os.path.realpath(tmp) not in text and str(Path.home()) not in text
    for item in strings(json.loads(text)):
        assert not item.startswith(("/", "file:", "sqlite:////")), item


def board_rows(capsys) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(capsys.readouterr().out)))


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A user's project folder with a small suite and the results its submission reuses."""
    root = tmp_path_factory.mktemp("project")
    (root / "small.yaml").write_text(yaml.safe_dump(SUITE))
    log_made_up_cells(root / "small.yaml", "pixelate", root / "results")
    return root


def submit(*extra: str) -> int:
    return main(["submit", "--mechanism", "pixelate", "--suite", "small.yaml", "--results-dir", "results", *extra])


def test_submit_writes_into_the_current_folder_and_the_board_shows_it_beside_the_shipped_ones(
        capsys, monkeypatch, project):
    monkeypatch.chdir(project)
    before = listing(SHIPPED_DIR)
    assert submit("--name", MINE) == 0
    out = capsys.readouterr().out
    (path,) = (project / "leaderboard" / "entries").glob("*.json")
    assert f"entry written: {path} (3 cells)" in out
    entry = json.loads(path.read_text())
    assert entry["name"] == MINE and entry["tracking_uri"] == "sqlite:///results/mlflow.db"
    assert_no_absolute_path(path, project)
    assert listing(SHIPPED_DIR) == before, "the package's entries folder was written"

    # A hand-copied shipped entry is the user's: it hides the baseline of its name, which is read once.
    shipped = SHIPPED_DIR / entry_names_in(SHIPPED_DIR)["blur"]
    (project / "leaderboard" / "entries" / shipped.name).write_bytes(shipped.read_bytes())
    try:
        assert main(["leaderboard", "show", "--format", "csv", "--results-dir", "results"]) == 0
        err = capsys.readouterr().err
        assert "your entry 'blur' has the name of a shipped baseline" in err
        assert main(["leaderboard", "show", "--format", "csv", "--results-dir", "results"]) == 0
        rows = board_rows(capsys)
    finally:
        (project / "leaderboard" / "entries" / shipped.name).unlink()
    names = [row["entry"] for row in rows]
    assert names.count(MINE) == 1 and names.count("blur") == 1
    shipped_names = set(entry_names_in(SHIPPED_DIR))
    assert shipped_names <= set(names), "every shipped baseline is on the boards"
    assert {row["benchmark"] for row in rows} >= {"fewshot_synth_faces", "classify_synth_scenes_obf_obf",
                                                   "reid_synth_persons", "dp_vit_synth_objects"}
    assert listing(SHIPPED_DIR) == before


def test_a_shipped_baselines_name_is_refused_beside_them_before_any_work(capsys, monkeypatch, tmp_path):
    from bench.cli import submit_cmd

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(submit_cmd, "conformance", lambda name: pytest.fail("the conformance suite ran"))
    (tmp_path / "small.yaml").write_text(yaml.safe_dump(SUITE))
    assert submit() == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "entry name 'pixelate' is a shipped baseline's" in err
    assert "--name" in err and not (tmp_path / "leaderboard").exists() and not (tmp_path / "results").exists()


def test_entries_names_the_folder_read_and_written_alone(capsys, monkeypatch, project):
    monkeypatch.chdir(project)
    before = listing(SHIPPED_DIR)
    assert submit("--entries", "elsewhere") == 0  # a named folder is read alone: no shipped name to avoid
    capsys.readouterr()
    (path,) = (project / "elsewhere").glob("*.json")
    assert load_entry(path)["name"] == "pixelate"
    assert_no_absolute_path(path, project)
    assert main(["leaderboard", "show", "--format", "csv", "--results-dir", "results", "--entries", "elsewhere",
                 "--suite", "small.yaml"]) == 0
    assert [row["entry"] for row in board_rows(capsys)] == ["pixelate"]
    assert listing(SHIPPED_DIR) == before


def test_the_repository_checkout_reads_its_entries_once_and_writes_them_only_when_named(capsys, monkeypatch):
    folders = entry_folders(None, cwd=ROOT)
    assert folders.shipped is None and len(folders.reading()) == 1 and same_folder(folders.reading()[0], SHIPPED_DIR)
    monkeypatch.chdir(ROOT)
    before = listing(SHIPPED_DIR)
    assert main(["submit", "--mechanism", "pixelate", "--suite", "smoke", "--results-dir", "results-not-made"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "package's own folder of shipped baselines" in err
    assert f"--entries {Path('leaderboard') / 'entries'}" in err
    assert listing(SHIPPED_DIR) == before and not (ROOT / "results-not-made").exists()


def test_verify_finds_an_entry_by_name_in_the_users_folder_then_the_shipped_one(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    args = argparse.Namespace(entries=None)
    shipped = entry_names_in(SHIPPED_DIR)["dp_pix"]
    assert find_entry(args, Path("dp_pix")) == SHIPPED_DIR / shipped
    mine = tmp_path / "leaderboard" / "entries"
    mine.mkdir(parents=True)
    (mine / "copy.json").write_bytes((SHIPPED_DIR / shipped).read_bytes())
    assert find_entry(args, Path("dp_pix")) == mine / "copy.json"
    assert find_entry(args, Path("copy")) == mine / "copy.json"
    with pytest.raises(Exception, match="no such file, and no entry of that name"):
        find_entry(args, Path("nothing-here"))


def test_old_entries_with_an_absolute_tracking_uri_still_read(tmp_path):
    shipped = SHIPPED_DIR / entry_names_in(SHIPPED_DIR)["identity"]
    entry = json.loads(shipped.read_text())
    entry["tracking_uri"] = "sqlite:////somewhere/else/results/mlflow.db"
    (tmp_path / "old.json").write_text(json.dumps(entry))
    rows, declarations = read_entries(tmp_path)
    assert len(rows) == len(entry["cells"]) and not declarations[0].unverified


@pytest.mark.parametrize("uri, expected", [
    ("sqlite:///{base}/results/mlflow.db", "sqlite:///results/mlflow.db"),
    ("sqlite:///{base}/results/mlflow.db?timeout=5", "sqlite:///results/mlflow.db?timeout=5"),
    ("sqlite:///results/mlflow.db", "sqlite:///results/mlflow.db"),
    ("sqlite:////elsewhere/results/mlflow.db", "sqlite store mlflow.db (path not recorded)"),
    ("file://{base}/mlruns", "mlruns"),
    ("{base}/mlruns", "mlruns"),
    ("/elsewhere/mlruns", "local store mlruns (path not recorded)"),
    ("https://user:secret@mlflow.example.org:5000/api", "https://mlflow.example.org:5000/api"),
    ("databricks", "databricks"),
    (None, None),
])
def test_a_recorded_tracking_uri_names_no_absolute_path(tmp_path, uri, expected):
    given = uri.format(base=tmp_path) if uri else uri
    assert portable_uri(given, tmp_path) == expected
