"""The quick references of the time estimates come from the shipped cells themselves (no table copied by hand)."""

from __future__ import annotations

import json

from bench.cell import estimate
from bench.cell.estimate_shipped import references_from, shipped_entries_folder, shipped_references


def cell(task, mechanism, seconds, cpu="CPU A", threads="1", profile="quick"):
    return {"task": task, "profile": profile, "mechanism": mechanism, "stage_seconds": seconds,
            "versions": {"cpu": cpu, "cpu_threads": threads}}


def test_the_reference_is_the_median_of_each_stage_and_of_each_mechanisms_release():
    refs = references_from([
        cell("t", "blur", {"data": 1.0, "release": 2.0, "task": 10.0, "attack.x": 5.0}),
        cell("t", "blur", {"data": 3.0, "release": 4.0, "task": 30.0, "attack.x": 7.0}),
        cell("t", "pixelate", {"data": 2.0, "release": 0.5, "task": 20.0}, cpu="CPU B", threads="2"),
        cell("t", "blur", {"task": 1e9}, profile="paper"),
        {"task": "t", "profile": "quick"},  # no stage times: passed over
    ])
    quick = refs[("t", "quick")]
    assert quick.stages == {"data": 2.0, "task": 20.0, "attack.x": 6.0}
    assert quick.release == {"blur": 3.0, "pixelate": 0.5}
    assert quick.cpu == "CPU A (1 thread)"  # the CPU most of the cells ran on
    assert refs[("t", "paper")].stages == {"task": 1e9}


def test_a_damaged_file_is_passed_over_and_an_empty_folder_gives_no_reference(tmp_path):
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "list.json").write_text("[1, 2]")
    assert shipped_references(tmp_path) == {}
    (tmp_path / "good.json").write_text(json.dumps({"cells": [cell("t", "blur", {"task": 4.0})]}))
    shipped_references.cache_clear()
    assert shipped_references(tmp_path)[("t", "quick")].stages == {"task": 4.0}


def test_every_shipped_board_has_a_reference_from_its_own_cells():
    folder = shipped_entries_folder()
    boards = set()
    for path in folder.glob("*.json"):
        boards |= {(c["task"], c["profile"]) for c in json.loads(path.read_text())["cells"]}
    assert len(boards) >= 4
    for board in boards:
        ref = estimate.reference(*board)
        assert ref is not None and ref.where == "shipped baselines'" and ref.stages["task"] > 0
    assert estimate.reference("fewshot_synth_faces", "smoke").where == estimate.SMOKE  # no shipped smoke board
    assert estimate.reference("fewshot_synth_faces", "nonesuch") is None
