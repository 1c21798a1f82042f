"""Submitted entries on the site: their sample sheet (verified by digest), their tuning-cost tag; the index's tables."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from types import SimpleNamespace

import pandas as pd

from bench.cli.submit_cmd import _tuning_cost, attach_sheet
from bench.scale.tune_cost import TUNING_COST_TAG
from leaderboard.boards import build_leaderboard
from leaderboard.cells import TUNING_NOT_IN_EPSILON
from leaderboard.render import build_site
from leaderboard.sheets import SHEET_FIELD, entry_sheets, run_sheet, write_entry_sheet
from leaderboard.store import read_entries
from tests.unit.test_leaderboard_store import entry_file, result
from tests.unit.test_protocol_boards import declare, row

PNG = b"\x89PNG\r\n\x1a\n" + b"sheet bytes"
TUNED = "selected by study 's' over 4 trial(s) of DP-SGD on the private training records"


def fake_tracker(tmp_path: Path, runs: dict[str, dict]) -> SimpleNamespace:
    """A store whose runs have the given artifacts (name -> bytes) and tags, in local folders."""
    made = {}
    for run_id, spec in runs.items():
        folder = tmp_path / "artifacts" / run_id
        folder.mkdir(parents=True)
        for name, data in spec.get("artifacts", {}).items():
            (folder / name).write_bytes(data)
        made[run_id] = SimpleNamespace(info=SimpleNamespace(run_id=run_id, artifact_uri=str(folder)),
                                       data=SimpleNamespace(tags=spec.get("tags", {})))

    def get_run(run_id):
        if run_id not in made:
            raise KeyError(run_id)
        return made[run_id]

    return SimpleNamespace(client=SimpleNamespace(get_run=get_run))


def test_submit_writes_a_runs_sheet_beside_the_entry_and_records_its_digest(tmp_path):
    tracker = fake_tracker(tmp_path, {"r0": {}, "r1": {"artifacts": {"samples.png": PNG}}})
    assert run_sheet(tracker, ["gone", "r0", "r1"]) == PNG
    entry = {"name": "my mask"}
    sheet = attach_sheet(entry, tmp_path / "entries", ["r0", "r1"], tracker)
    assert sheet is not None and sheet.read_bytes() == PNG and sheet.parent == tmp_path / "entries"
    assert entry[SHEET_FIELD] == {"file": sheet.name, "sha256": hashlib.sha256(PNG).hexdigest()}
    assert attach_sheet({"name": "x"}, tmp_path / "entries", ["r0"], tracker) is None


def test_the_board_shows_an_entry_sheet_only_when_it_matches_its_digest(tmp_path):
    folder = tmp_path / "entries"
    folder.mkdir()
    good = write_entry_sheet(PNG, folder / "good.json")
    entry_file(folder, "good", **{SHEET_FIELD: good})
    entry_file(folder, "edited", **{SHEET_FIELD: write_entry_sheet(PNG, folder / "edited.json")})
    (folder / "edited.png").write_bytes(PNG + b"changed")
    entry_file(folder, "escapes", **{SHEET_FIELD: {"file": "../good.png", "sha256": good["sha256"]}})
    entry_file(folder, "missing", **{SHEET_FIELD: {"file": "missing.png", "sha256": good["sha256"]}})
    sheets, notes = entry_sheets(folder)
    assert sheets == {"pixelate": folder / "good.png"}
    assert len(notes) == 3
    assert any("edited.json" in n and "does not match the digest" in n for n in notes)
    assert any("escapes.json" in n and "not a PNG file name beside the entry" in n for n in notes)
    assert any("missing.json" in n and "is missing" in n for n in notes)
    assert entry_sheets(tmp_path / "nowhere") == ({}, [])

    rows, declarations = read_entries(folder)
    site = tmp_path / "site"
    build_site(build_leaderboard(rows, declarations), site, sheets)
    page = next((site / "mechanisms").glob("pixelate-*.html")).read_text(encoding="utf-8")
    assert 'id="sample-sheet"' in page and (site / "sheets").is_dir()


def test_an_entry_carries_the_tuning_cost_tag_and_the_board_shows_it(tmp_path):
    tracker = fake_tracker(tmp_path, {"tuned": {"tags": {TUNING_COST_TAG: TUNED}}, "plain": {}})
    assert _tuning_cost(tracker, "tuned") == {"tuning_cost": TUNED}
    assert _tuning_cost(tracker, "plain") == {} and _tuning_cost(tracker, "gone") == {}
    claim = {"epsilon": 3.0, "delta": 1e-5, "unit": "training record (DP-SGD)", "method": "DP-SGD(flat, ε=3)"}
    cells = [{**result(f"k{s}", seed=s, training_claim=claim).to_dict(), "run_id": f"r{s}", "tuning_cost": TUNED}
             for s in range(3)]
    entry_file(tmp_path, "tuned", cells=cells)
    rows, declarations = read_entries(tmp_path)
    assert set(rows["tuning_cost"]) == {TUNED}
    standing = build_leaderboard(rows, declarations).boards[0].standing("tuned")
    assert standing.claim_type.endswith(TUNING_NOT_IN_EPSILON)
    assert any("bench tune" in note for note in standing.notes)


def test_the_index_leads_with_each_boards_ranking_table(tmp_path):
    rows = [row(name, level, seed, u + 0.01 * seed, p) for name, shift in (("a", 0.0), ("b", -0.2))
            for seed in (0, 1, 2) for level, (u, p) in enumerate([(0.8 + shift, 0.4), (0.6 + shift, 0.7)])]
    leaderboard = build_leaderboard(pd.DataFrame(rows), [declare("a", levels=range(2)), declare("b", levels=range(2))])
    index = build_site(leaderboard, tmp_path / "site").read_text(encoding="utf-8")
    table = index[index.index('<table class="ranking">'):index.index("</table>")]
    entries = re.findall(r'<a class="entry" href="[^"]+">([^<]+)</a>', table)
    board = leaderboard.boards[0]
    assert entries == [s.name for s in board.standings] == ["a", "b"]
    ranks = re.findall(r'<td class="num rank">([^<]+)</td>', table)
    assert ranks == ["1", "2"]
    estimate = board.standing("a").estimate
    assert f"{estimate.mean:.3f} <span class=\"ci\">[{estimate.low:.3f}, {estimate.high:.3f}]</span>" in table
    assert 'class="full-board" href="boards/' in index
    assert index.index('<table class="ranking">') < index.index("<h2>Exploration</h2>")
    css = (tmp_path / "site" / "static" / "style.css").read_text(encoding="utf-8")
    assert ".table-wrap { overflow-x: auto;" in css
    cell_rules = [line for line in css.splitlines() if re.search(r"\b(td|th)\b", line.split("{")[0])]
    assert cell_rules and not [line for line in cell_rules if "anywhere" in line]

