"""The entries the repository ships (leaderboard/entries/, issue 40) are what the board can rank as they are.

Every shipped entry must read, verify against its result digests, audits and conformance
record, and be current: today's code plans each of its cells under the key it records
(:mod:`leaderboard.staleness`). A version bump that changes any of their keys fails here
until ``bench submit --refresh`` has recomputed those cells, unless its board is listed in
``RECOMPUTE_PENDING.yaml`` (waiting for the one recompute of all shipped boards), and a listed
board must still have a stale entry. Nothing is computed.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from bench.core.registry import mechanisms
from leaderboard.protocol import MIN_SEEDS
from leaderboard.publish import publish
from leaderboard.sheets import SHEET_FIELD, entry_sheets
from leaderboard.staleness import check_staleness
from leaderboard.store import ENTRIES_DIR, load_entry
from leaderboard.verification import check_entry

SHIPPED = sorted(ENTRIES_DIR.glob("*.json"))
PENDING = yaml.safe_load((ENTRIES_DIR / "RECOMPUTE_PENDING.yaml").read_text()) or {}
"""Boards waiting for the recompute of the shipped boards: benchmark -> the change that made them stale."""
BUILT_IN = ("identity", "pixelate", "blur", "gaussian_noise", "dp_pix", "image_dp", "face_blur", "face_overlay",
            "dp_latent")
FACE_MECHANISMS = tuple(m for m in BUILT_IN if mechanisms.get(m).uses_boxes)
"""Built-in mechanisms that need face boxes: a board ranks them only where its data has them (issue 40)."""
BOARDS = {"fewshot_synth_faces": ("", BUILT_IN), "classify_synth_scenes_obf_obf": ("_scenes", BUILT_IN),
          "reid_synth_persons": ("_reid", tuple(m for m in BUILT_IN if m not in FACE_MECHANISMS))}
"""The shipped boards of mechanisms: benchmark -> (the suffix of its entries' names, the built-in mechanisms that
apply to its data) (docs/baselines.md)."""
METHOD_BOARDS = {"dp_vit_synth_objects": "dp_vit_quick"}
"""The shipped boards of training methods: benchmark -> the suite whose every method is an entry of identity."""


def _method_entries(suite: str) -> list[str]:
    from bench.cli.submit_cmd import entry_names, suite_labels
    from bench.scale.grid import load_suite

    return sorted(entry_names("identity", suite_labels(load_suite(suite))).values())


def _mechanisms_on(benchmark: str) -> set[str]:
    return {load_entry(p)["mechanism"] for p in SHIPPED if {c["task"] for c in load_entry(p)["cells"]} == {benchmark}}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_a_shipped_entry_verifies_and_is_not_stale(path: Path):
    entry = load_entry(path)
    check = check_entry(entry)
    assert check.verified, f"{path.name}: {check.status}"
    staleness = check_staleness(entry)
    assert not staleness.unchecked, f"{path.name}: {staleness.unchecked[0]}"
    benchmarks = {c["task"] for c in entry["cells"]}
    assert not staleness.is_stale or benchmarks <= set(PENDING), (
        f"{path.name} is stale: {staleness.summary()}; recompute it with "
        f"'bench submit --refresh --entries leaderboard/entries --name {entry['name']}' in the checkout")
    assert len(entry["declaration"]["seeds"]) >= MIN_SEEDS
    assert {c["cell_key"] for c in entry["cells"]} == {c["cell_key"] for c in entry["declaration"]["cells"]}
    assert all(c["synthetic"] for c in entry["cells"]), "a shipped baseline is computed on the embedded data"
    assert not any(c.get("tuning_cost") for c in entry["cells"])


@pytest.mark.parametrize("benchmark", BOARDS)
def test_every_built_in_mechanism_that_applies_has_a_baseline_on_each_shipped_board_with_its_sample_sheet(benchmark):
    assert _mechanisms_on(benchmark) == set(BOARDS[benchmark][1]) and set(BUILT_IN) <= set(mechanisms.list())
    sheets, notes = entry_sheets(ENTRIES_DIR)
    assert not notes and set(sheets) == set(BUILT_IN)
    assert all(SHEET_FIELD in load_entry(p) for p in SHIPPED), "every shipped entry has its verified sample sheet"


def test_the_published_board_ranks_every_shipped_baseline_with_nothing_computed(tmp_path):
    notes: list[str] = []
    index = publish(tmp_path / "board", docs=None, say=notes.append)
    assert not [n for n in notes if " is stale, shown unranked" not in n or not PENDING], notes
    table = pd.read_csv(index.parent / "leaderboard.csv")
    for benchmark, (suffix, applicable) in BOARDS.items():
        board = table[table["benchmark"] == benchmark]
        assert sorted(board["entry"]) == sorted(m + suffix for m in applicable), benchmark
        if benchmark in PENDING:  # shown, unranked and marked stale, until the recompute
            assert board["status"].str.startswith("stale").all() and board["rank"].isna().all(), benchmark
        else:
            assert (board["status"] == "ranked").all() and board["rank"].notna().all(), benchmark
    for benchmark, suite in METHOD_BOARDS.items():
        board = table[table["benchmark"] == benchmark]
        assert sorted(board["entry"]) == _method_entries(suite) and len(board) > 1, benchmark
        assert (board["mechanism"] == "identity").all(), benchmark
        assert board["rank"].isna().all() if benchmark in PENDING else board["rank"].notna().all(), benchmark
    boards = len(BOARDS) + len(METHOD_BOARDS)
    index_html = (index.parent / "index.html").read_text(encoding="utf-8")
    assert index_html.count('href="boards/') >= boards
    # a mechanism's claim types on several boards are told apart, not run together by commas
    assert "latent (clipped); latent (clipped), WITHHELD for train" in index_html


@pytest.mark.parametrize("benchmark", sorted(PENDING))
def test_a_board_listed_as_pending_recompute_is_still_stale(benchmark: str):
    stale = [p.name for p in SHIPPED if {c["task"] for c in load_entry(p)["cells"]} == {benchmark}
             and check_staleness(load_entry(p)).is_stale]
    assert stale, f"{benchmark} is recomputed: delete its line from leaderboard/entries/RECOMPUTE_PENDING.yaml"
