"""Stale entries (issue 40): a version bump marks an entry's cells stale on the board, and
``bench submit --refresh`` recomputes exactly those cells and rewrites only that entry.

As in ``test_submit.py``, made-up results are logged under the cells' real keys first, so
submitting (and refreshing) reuses them: the grid's own count says which cells it was handed.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import yaml

from bench.cli import main
from bench.cli.submit_cmd import entry_path
from bench.core.registry import mechanisms
from bench.storage.tracking import Tracker
from leaderboard.staleness import check_staleness
from leaderboard.store import load_entry
from leaderboard.verification import check_entry
from tests.integration.test_submit import SUITE, log_made_up_cells, made_up


@pytest.fixture
def env(tmp_path, shared_cache):
    suite = tmp_path / "small.yaml"
    suite.write_text(yaml.safe_dump({**SUITE, "mechanisms": [{"name": "pixelate", "grid": {"block": [8]}},
                                                            {"name": "blur", "grid": {"radius": [2.0]}}]}))
    results, entries = tmp_path / "results", tmp_path / "entries"
    for name in ("pixelate", "blur"):
        log_made_up_cells(suite, name, results)
        assert main(["submit", "--mechanism", name, "--suite", str(suite), "--results-dir", str(results),
                     "--cache-dir", str(shared_cache), "--entries", str(entries)]) == 0
    return {"suite": suite, "results": results, "entries": entries, "cache": shared_cache}


def log_bumped_cells(env, mechanism: str, version: int) -> None:
    """Logs made-up results of the mechanism's new version under the keys its cells have today."""
    from bench.cli.submit_cmd import submission_suite
    from bench.scale.grid import Placement, expand

    tracker = Tracker(env["results"])
    for cell in expand(submission_suite(str(env["suite"]), mechanism, None), Placement(results_dir=env["results"])):
        result = dataclasses.replace(made_up(cell, 0.5, 0.6), mechanism_version=version)
        tracker.log_cell(result, {"run": {"overrides": {}}}, {})


def refresh_argv(env, *extra: str) -> list[str]:
    return ["submit", "--refresh", "--results-dir", str(env["results"]), "--cache-dir", str(env["cache"]),
            "--entries", str(env["entries"]), *extra]


def test_a_version_bump_marks_only_that_mechanisms_entry_stale_and_refresh_recomputes_only_its_cells(
        capsys, env, monkeypatch):
    pixelate, blur = (entry_path(env["entries"], name) for name in ("pixelate", "blur"))
    blur_before = blur.read_bytes()
    assert not check_staleness(load_entry(pixelate)).is_stale and not check_staleness(load_entry(blur)).is_stale
    capsys.readouterr()

    version = mechanisms.get("pixelate").version
    monkeypatch.setattr(mechanisms.get("pixelate"), "version", version + 1)
    stale = check_staleness(load_entry(pixelate))
    assert stale.summary() == (f"3 of 3 cell(s) computed by older code (mechanism pixelate version {version}, "
                               f"version {version + 1} registered)")
    assert not check_staleness(load_entry(blur)).is_stale

    # The board says so and shows the entry unranked.
    assert main(["leaderboard", "show", "--entries", str(env["entries"]), "--suite", str(env["suite"]),
                 "--results-dir", str(env["results"] / "none")]) == 0
    out, err = capsys.readouterr()
    assert "entry 'pixelate' is stale, shown unranked" in err and "--refresh --name pixelate" in err
    assert "'blur' is stale" not in err
    pixelate_row = next(line for line in out.splitlines() if " pixelate " in f" {line} ")
    assert pixelate_row.split()[0] == "–" and "stale:" in pixelate_row

    # The refreshed cells (the new version's keys) are already in the store: refresh must hand exactly 3 to the grid.
    log_bumped_cells(env, "pixelate", version + 1)
    assert main(refresh_argv(env)) == 0
    out, err = capsys.readouterr()
    assert "grid: 3 cells: 0 done, 3 skipped" in err
    assert f"entry refreshed: {pixelate} (3 of 3 cells recomputed)" in out
    assert blur.read_bytes() == blur_before

    entry = load_entry(pixelate)
    assert entry["mechanism_version"] == version + 1 and entry["refreshed"]["cells"] == 3
    assert {c["cell_key"] for c in entry["cells"]} == {c["cell_key"] for c in entry["declaration"]["cells"]}
    assert check_entry(entry).verified and not check_staleness(entry).is_stale

    assert main(refresh_argv(env)) == 0
    assert "no stale entries" in capsys.readouterr().out


def test_refresh_names_a_missing_entry_in_one_line(capsys, env):
    assert main(refresh_argv(env, "--name", "pixelat")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("--name: no entry 'pixelat' in " + str(env["entries"]) + "; did you mean 'pixelate'?")


def test_refresh_refuses_options_that_would_change_the_declared_cells(capsys, env):
    assert main(refresh_argv(env, "--seeds", "0,1,2,3", "--set", "task.epochs=1")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("--seeds, --set cannot change them; select entries with --name or --mechanism only")


def test_refresh_refuses_an_edited_entry(capsys, env, monkeypatch):
    path = entry_path(env["entries"], "pixelate")
    entry = json.loads(path.read_text())
    entry["cells"][0]["utility"]["acc"] = 0.99
    path.write_text(json.dumps(entry))
    monkeypatch.setattr(mechanisms.get("pixelate"), "version", mechanisms.get("pixelate").version + 1)
    capsys.readouterr()
    assert main(refresh_argv(env)) == 2
    assert "entry 'pixelate' is unverified: 1 of 3 cell(s) do not match their result digest" in capsys.readouterr().err
