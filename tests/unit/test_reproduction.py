"""Ranked means reproduced (issue 62): the issue's forgery is not ranked, and verify's tolerance across hardware.

The forgery: the shipped identity entry with 0.10 added to every accuracy, every privacy
score set to 0.9 and every result digest recomputed with the project's own function. Its
digests check, so only two things can tell: the pin of the project's baselines (the file
differs from the one the maintainers committed) and recomputing it (``bench leaderboard
verify``), whose tolerance on another machine is the entry's own seed-to-seed spread.
"""

from __future__ import annotations

import copy
import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

import leaderboard
from leaderboard.boards import build_leaderboard
from leaderboard.reproduce import TRAINING_Z, CellCheck, compare, seed_spread
from leaderboard.reproduced import (
    BASELINES_FILE,
    SELF_REPORTED,
    pinned_baselines,
    read_record,
    record_path,
    reproduction_of,
    write_record,
)
from leaderboard.store import read_entries
from leaderboard.verification import DIGEST_FIELD, cell_digest, check_entry

SHIPPED = Path(leaderboard.__file__).parent / "entries"
FACES = sorted(p for p in SHIPPED.glob("*.json") if json.loads(p.read_text())["cells"][0]["task"] == "fewshot_synth_faces")


def forged_identity() -> dict:
    entry = json.loads((SHIPPED / "identity-689f6a62.json").read_text(encoding="utf-8"))
    entry["name"] = "identity_improved"
    for cell in entry["cells"]:
        cell["utility"] = {k: (v + 0.10 if k == cell["primary_metric"] else v) for k, v in cell["utility"].items()}
        cell["privacy"] = {name: 0.9 for name in cell["privacy"]}
        cell["privacy_score"] = 0.9
        cell[DIGEST_FIELD] = cell_digest(cell)
    return entry


def test_every_shipped_entry_is_a_pinned_baseline():
    pins = pinned_baselines(SHIPPED)
    assert set(pins) == {p.name for p in SHIPPED.glob("*.json")}
    assert all(reproduction_of(p).reproduced for p in SHIPPED.glob("*.json"))


def test_the_issue_s_forgery_checks_its_digests_but_is_never_ranked(tmp_path):
    folder = tmp_path / "entries"
    folder.mkdir()
    for path in FACES:
        shutil.copy(path, folder / path.name)
    shutil.copy(SHIPPED / BASELINES_FILE, folder / BASELINES_FILE)
    forged = forged_identity()
    assert check_entry(forged).verified  # the digests cannot tell
    (folder / "identity-improved.json").write_text(json.dumps(forged), encoding="utf-8")
    # the same forgery edited into a pinned baseline's own file
    edited = {**forged, "name": "identity"}
    (folder / "identity-689f6a62.json").write_text(json.dumps(edited), encoding="utf-8")

    rows, declarations = read_entries(folder)
    board = build_leaderboard(rows, declarations).boards[0]
    for name in ("identity_improved", "identity"):
        standing = board.standing(name)
        assert not standing.ranked and standing.rank is None, name
        assert standing.reproduction.startswith(SELF_REPORTED), name  # the status says stale first while its board waits
    assert "differs from the baseline pinned" in board.standing("identity").reproduction
    assert "no record of 'bench leaderboard verify'" in board.standing("identity_improved").reproduction
    pending = yaml.safe_load((SHIPPED / "RECOMPUTE_PENDING.yaml").read_text()) or {}
    if "fewshot_synth_faces" in pending:  # its baselines are stale, unranked too, until the recompute
        return
    ranked = board.ranked
    assert {s.name for s in ranked} == {json.loads(p.read_text())["name"] for p in FACES} - {"identity"}
    # its numbers would have ranked it first
    assert board.standing("identity_improved").estimate.mean > ranked[0].estimate.mean


def test_verify_across_hardware_allows_the_entry_s_training_spread_and_catches_the_forgery():
    honest = json.loads((SHIPPED / "identity-689f6a62.json").read_text(encoding="utf-8"))
    stated = honest["cells"][0]
    spread = seed_spread(honest["cells"], stated)
    metric = f"utility.{stated['primary_metric']}"
    assert math.isfinite(spread[metric]) and spread[metric] > 0
    allowed = TRAINING_Z * math.sqrt(2) * spread[metric]

    def recomputed(shift: float, cpu: str = "AMD EPYC") -> dict:
        cell = copy.deepcopy(stated)
        cell["utility"][stated["primary_metric"]] += shift
        cell["versions"] = {**cell["versions"], "cpu": cpu, "cpu_capability": "AVX2"}
        return cell

    for shift, status in ((0.5 * allowed, "match"), (0.10, "mismatch")):
        check = CellCheck(stated["cell_key"], "identity")
        compare(stated, recomputed(shift), check, spread)
        assert check.status == status, (shift, allowed, check.differences)
        assert "seed spread" in check.tolerance and "AMD EPYC (AVX2)" in check.tolerance
    assert allowed < 0.10  # the forgery's +0.10 lies outside what training noise explains
    same = CellCheck(stated["cell_key"], "identity")
    compare(stated, copy.deepcopy(stated), same, spread)
    assert same.status == "match" and same.tolerance.startswith("equal on the same hardware and versions")
    tiny = CellCheck(stated["cell_key"], "identity")
    nudged = copy.deepcopy(stated)
    nudged["utility"][stated["primary_metric"]] += 1e-9
    compare(stated, nudged, tiny, spread)
    assert tiny.status == "mismatch"  # identical hardware and versions: exact


@pytest.mark.parametrize("verdict", ["match", "mismatch"])
def test_a_record_counts_only_for_the_file_it_names_and_only_when_every_cell_matched(tmp_path, verdict):
    path = tmp_path / "entry.json"
    entry = json.loads((SHIPPED / "identity-689f6a62.json").read_text(encoding="utf-8"))
    path.write_text(json.dumps(entry), encoding="utf-8")
    assert read_record(path).text.startswith(SELF_REPORTED) and "no record" in read_record(path).text
    checks = [CellCheck(entry["cells"][0]["cell_key"], "identity", status=verdict, hardware="AMD EPYC (AVX512), 1 thread")]
    write_record(path, entry, checks, sample_seed=0, hardware={"label": "AMD EPYC (AVX512), 1 thread"},
                 code={"git_sha": "abc"}, seconds=1.0)
    assert record_path(path).name == "entry.reproduced" and not list(tmp_path.glob("*.tmp"))
    assert read_record(path).reproduced == (verdict == "match")
    if verdict == "match":
        assert read_record(path).text.startswith("reproduced: 1 of 3 cells on AMD EPYC (AVX512), 1 thread, ")
        path.write_text(json.dumps(entry) + " ", encoding="utf-8")  # any change to the file
        assert "changed after it was reproduced" in read_record(path).text
    record_path(path).write_text("{not json", encoding="utf-8")
    assert "not a reproduction record" in read_record(path).text


def test_a_board_of_local_runs_needs_no_record():
    from tests.unit.test_protocol_boards import declare, row

    rows = [row("local_entry", level, seed, 0.5 + 0.1 * level, 0.5 - 0.1 * level) for seed in (0, 1, 2)
            for level in range(5)]
    board = build_leaderboard(pd.DataFrame(rows), [declare("local_entry")]).boards[0]
    assert board.standing("local_entry").ranked and board.standing("local_entry").reproduction == ""


def test_derived_privacy_errors_are_not_compared_but_what_they_derive_from_is():
    honest = json.loads((SHIPPED / "identity-689f6a62.json").read_text(encoding="utf-8"))
    stated = honest["cells"][0]
    attack = next(iter(stated["attacks"]))
    recomputed = copy.deepcopy(stated)
    recomputed["attacks"][attack]["privacy_se"] = 0.5  # another formula for the same measurement (issue 55)
    recomputed["privacy_score_se"] = 0.5
    check = CellCheck(stated["cell_key"], "identity")
    compare(stated, recomputed, check, seed_spread(honest["cells"], stated))
    assert check.status == "match", check.differences
    clean = next(k for k in stated["attacks"][attack] if k.endswith("_clean"))
    recomputed["attacks"][attack][clean] += 0.2
    compare(stated, recomputed, again := CellCheck(stated["cell_key"], "identity"), seed_spread(honest["cells"], stated))
    assert again.status == "mismatch" and clean in " ".join(again.differences)
