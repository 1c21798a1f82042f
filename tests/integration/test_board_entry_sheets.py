"""bench leaderboard build shows a submitted entry's sample sheet when it matches its digest, and warns otherwise."""

from __future__ import annotations

from leaderboard.sheets import SHEET_FIELD, write_entry_sheet
from tests.unit.test_board_entries_site import PNG
from tests.unit.test_leaderboard_store import entry_file, result


def test_leaderboard_build_shows_a_submitted_entrys_sheet_and_warns_of_a_bad_one(tmp_path, capsys):
    from bench.cli import main

    folder = tmp_path / "entries"
    folder.mkdir()
    entry_file(folder, "good", **{SHEET_FIELD: write_entry_sheet(PNG, folder / "good.json")})
    other = [{**result(f"o{s}", seed=s).to_dict(), "mechanism": "blur", "run_id": f"o{s}"} for s in range(3)]
    path = entry_file(folder, "edited", cells=other, mechanism="blur",
                      **{SHEET_FIELD: write_entry_sheet(PNG, folder / "edited.json")})
    path.with_suffix(".png").write_bytes(PNG + b"edited")
    suite = tmp_path / "tiny.yaml"
    suite.write_text("profile: smoke\nseeds: [0, 1, 2]\nbenchmarks: [fewshot_synth_faces]\n"
                     "mechanisms:\n  - name: identity\n")
    site = tmp_path / "site"
    assert main(["leaderboard", "build", "--entries", str(folder), "--results-dir", str(tmp_path / "results"),
                 "--out", str(site), "--suite", str(suite)]) == 0
    err = capsys.readouterr().err
    assert "entry edited.json: its sample sheet edited.png does not match the digest" in err
    pages = {p.name.split("-")[0]: p.read_text(encoding="utf-8") for p in (site / "mechanisms").glob("*.html")}
    assert 'id="sample-sheet"' in pages["pixelate"] and 'id="sample-sheet"' not in pages["blur"]
