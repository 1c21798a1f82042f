"""Reading results for the leaderboard: MLflow runs (superseded, old schema, settings) and entry files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.core.interfaces import Result
from bench.errors import BenchError
from bench.storage.tracking import Tracker
from leaderboard.store import SUPERSEDED, Skipped, combine, load_entry, read_entries, runs_frame

TASK = "fewshot_synth_faces"


def result(key: str, seed: int = 0, privacy: float | None = 0.5, schema: int = 2, **changes) -> Result:
    return Result(
        cell_key=key, task=TASK, dataset="synth_faces", mechanism="pixelate", mechanism_version=1,
        params={"block": 4}, seed=seed, profile="smoke", utility={"acc": 0.6, "acc_ci95": 0.02}, primary_metric="acc",
        attacks={"face_reid": {"top1": 0.2}}, privacy={"face_reid": privacy}, privacy_score=privacy, claim=None,
        runtime_s=1.0, versions={}, git_sha="x", dataset_fingerprint="fp", synthetic=True, device="cpu",
        created="2026-01-01T00:00:00+00:00", schema=schema, **changes,
    )


def run_config(overrides: dict) -> dict:
    """config.json as the runner logs it (its run section holds str() of each RunConfig field)."""
    return {"task": {}, "attacks": {"face_reid": {}}, "run": {"overrides": str(overrides), "attacks": "None"}}


@pytest.fixture(scope="module")
def tracker(tmp_path_factory):
    tracker = Tracker(tmp_path_factory.mktemp("store") / "results")
    tracker.log_cell(result("a"), run_config({}), {})
    rerun = tracker.log_cell(result("a"), run_config({}), {})
    replaced = tracker.log_cell(result("a"), run_config({}), {})
    tracker.client.set_tag(replaced, SUPERSEDED, rerun)
    tracker.log_cell(result("b", seed=1), run_config({"task": {"epochs": "3"}}), {})
    for i in range(3):
        tracker.log_cell(result(f"old{i}", privacy=1.0, schema=1), run_config({}), {})
    return tracker


def test_runs_frame_keeps_every_current_run_and_notes_what_it_leaves_out(tracker):
    skipped = Skipped()
    frame = runs_frame(tracker, skipped)
    notes = skipped.notes()
    assert sorted(frame["cell_key"]) == ["a", "a", "b"]
    assert frame["run_id"].is_unique and set(frame["source"]) == {"local"}
    by_key = frame.groupby("cell_key")["overrides"].first()
    assert by_key["b"] == {"task": {"epochs": "3"}} and by_key["a"] == {}
    assert len(notes) == 2
    old = next(n for n in notes if "schema 1" in n)
    assert old.startswith("3 result(s) of schema 1 skipped (3 in the MLflow runs)") and "old formula" in old
    assert next(n for n in notes if "superseded" in n).startswith("1 run(s) superseded")


def test_a_result_that_fails_its_digest_is_left_out_and_noted(tmp_path):
    from urllib.parse import urlparse

    tracker = Tracker(tmp_path / "results")
    kept = tracker.log_cell(result("a"), run_config({}), {})
    edited = tracker.log_cell(result("b"), run_config({}), {})
    path = Path(urlparse(tracker.client.get_run(edited).info.artifact_uri).path) / "result.json"
    path.write_text(path.read_text().replace('"seed": 0', '"seed": 7'))
    skipped = Skipped()
    frame = runs_frame(tracker, skipped)
    assert list(frame["run_id"]) == [kept]
    assert skipped.unverified == 1 and any(n.startswith("1 FINISHED run(s) have a result.json that does not match")
                                           for n in skipped.notes())


def test_settings_from_config_json_separate_boards(tracker):
    from leaderboard.cells import cells_frame

    cells = cells_frame(runs_frame(tracker))
    boards = cells.groupby("cell_key")["board"].first()
    assert boards["a"] != boards["b"]


def entry_file(folder, name="team", schema=2, cells=None, **extra):
    cells = cells if cells is not None else [{**result(f"k{s}", seed=s).to_dict(), "run_id": f"r{s}"} for s in range(3)]
    data = {"schema": schema, "name": name, "mechanism": "pixelate", "cells": cells, **extra}
    if schema == 2 and "declaration" not in extra:
        data["declaration"] = {"suite": "s", "profile": "smoke", "seeds": [0, 1, 2], "cells": [
            {"cell_key": c["cell_key"], "benchmark": TASK, "seed": c["seed"], "params": c["params"]} for c in cells]}
    path = folder / f"{name}.json"
    path.write_text(json.dumps(data))
    return path


def test_entries_yield_rows_and_declarations(tmp_path):
    entry_file(tmp_path, "team", suite={"name": "s", "overrides": {"task": {"epochs": 2}}})
    old_cells = [{**result(f"o{s}", seed=s).to_dict(), "run_id": ""} for s in range(3)]
    old_cells.append({**result("o9", seed=9, privacy=1.0, schema=1).to_dict(), "run_id": ""})
    entry_file(tmp_path, "legacy", schema=1, cells=old_cells, suite={"name": "standard", "profile": "smoke",
                                                                   "seeds": [0, 1, 2]})
    skipped = Skipped(old_schema={"the MLflow runs": 2})
    rows, declarations = read_entries(tmp_path, skipped)
    assert sorted(rows["source"].unique()) == ["entry:legacy", "entry:team"]
    assert len(rows) == 6
    assert rows.loc[rows["source"] == "entry:team", "overrides"].tolist() == [{"task": {"epochs": 2}}] * 3
    assert {d.name: len(d.cells) for d in declarations} == {"legacy": 3, "team": 3}
    note, *stale = skipped.notes()
    assert note.startswith("3 result(s) of schema 1 skipped (2 in the MLflow runs, 1 in entry legacy.json)")
    # Their made-up cell keys are not what this code plans for those cells: both entries read as stale.
    assert set(skipped.stale) == {"legacy", "team"} and len(stale) == 2
    assert all(d.stale.startswith("3 of 3 cell(s) computed by older code") for d in declarations)


def test_combine_prefers_the_entry_copy_of_a_cell(tracker, tmp_path):
    runs = runs_frame(tracker)
    local = runs[runs["cell_key"] == "b"].iloc[0]
    entry_file(tmp_path, "mine", cells=[{**result("b", seed=1).to_dict(), "run_id": local["run_id"]}])
    both = combine(runs, read_entries(tmp_path)[0])
    assert len(both) == len(runs)
    assert both.loc[both["cell_key"] == "b", "source"].tolist() == ["entry:mine"]


@pytest.mark.parametrize(
    "content, fragment",
    [
        ("{not json", "not a readable JSON file"),
        (json.dumps({"schema": 2, "name": "x"}), "needs keys"),
        (json.dumps({"schema": 7, "name": "x", "mechanism": "m", "cells": [1]}), "schema 7, this version reads 1, 2"),
        (json.dumps({"schema": 2, "name": "x", "mechanism": "m", "cells": [{"schema": 2}]}), "needs a 'declaration'"),
        (json.dumps({"schema": 1, "name": "x", "mechanism": "m", "cells": [{"schema": 2, "task": "t"}]}),
         "cells[0] is not a result"),
        (json.dumps({"schema": 1, "name": "x", "mechanism": "m", "cells": []}), "non-empty list"),
    ],
)
def test_malformed_entries_are_one_line_errors(tmp_path, content, fragment):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(BenchError, match="bad.json") as info:
        load_entry(path)
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_two_entries_with_one_name_are_refused(tmp_path):
    entry_file(tmp_path, "same")
    data = json.loads((tmp_path / "same.json").read_text())
    (tmp_path / "other.json").write_text(json.dumps(data))
    with pytest.raises(BenchError, match="same name 'same'"):
        read_entries(tmp_path)


def test_a_declaration_without_cells_is_refused(tmp_path):
    entry_file(tmp_path, "bad", declaration={"suite": "s", "cells": [{"benchmark": TASK}]})
    with pytest.raises(BenchError, match="does not list cells"):
        read_entries(tmp_path)



def test_left_out_runs_are_named_a_few_then_counted_and_an_empty_view_says_why():
    from types import SimpleNamespace

    from leaderboard.skipped import NAMED

    def run(i: int, key: str = "") -> SimpleNamespace:
        return SimpleNamespace(info=SimpleNamespace(run_id=f"{i:02d}" + "f" * 30), data=SimpleNamespace(
            tags={"bench.cell_key": key} if key else {}))

    skipped = Skipped()
    assert skipped.nothing_left("results") == "no finished cells in results (run 'bench run' or 'bench grid' first)"
    for i in range(NAMED + 2):
        skipped.leave_out("tagless", run(i))
    skipped.leave_out("changed", run(99, key="a" * 40))
    changed, tagless = skipped.runs_left_out()
    assert tagless.startswith(f"{NAMED + 2} FINISHED run(s) lost their tags in the tracking database")
    assert "run 00ffffffffff, run 01ffffffffff, run 02ffffffffff and 2 more ('bench runs' lists them)" in tagless
    assert f"run 99ffffffffff (cell {'a' * 12})" in changed and skipped.unverified == NAMED + 3
    line = skipped.nothing_left("results")
    assert line.startswith("no finished cells in results that can be shown: ") and "\n" not in line
    assert tagless in line and changed in line
