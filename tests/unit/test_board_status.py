"""One status per claim on the board (withheld, UNBACKED), legends that name entries, privacy bars with noise."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from leaderboard.boards import UNBACKED, WITHHELD, build_leaderboard
from leaderboard.cells import cells_frame, claim_label
from leaderboard.exports import render_markdown
from leaderboard.plot import frontier_figure, legend_text
from leaderboard.plot_points import claim_text, configuration_points, privacy_spread
from leaderboard.report import report_table
from leaderboard.table import board_cells_table, claim_audit_label
from tests.unit.test_protocol_boards import declare, row

CURVE = [(0.80, 0.40), (0.60, 0.60), (0.40, 0.80)]
SHIFT = {0: 0.00, 1: 0.01, 2: -0.01}
WITHHELD_CLAIM = {"epsilon": 100.0, "delta": 0.0, "unit": "latent (clipped)", "withheld": ["train"]}
NOMINAL = {"epsilon": 3.0, "delta": 0.0, "unit": "m-pixel (m=1)", "backed": False}
FORMAL = {"epsilon": 3.0, "delta": 0.0, "unit": "m-pixel (m=1)"}


def entry(name, seeds=(0, 1, 2), **fields):
    return [{**row(name, level, seed, u + SHIFT[seed], p + SHIFT[seed]), **fields}
            for seed in seeds for level, (u, p) in enumerate(CURVE)]


def board_of(rows, *names, seeds=(0, 1, 2)):
    leaderboard = build_leaderboard(pd.DataFrame(rows), [declare(n, levels=range(3), seeds=seeds) for n in names])
    return leaderboard, leaderboard.boards[0]


def test_a_withheld_claim_has_one_status_and_no_not_audited_beside_it():
    leaderboard, board = board_of(entry("latent", claim=WITHHELD_CLAIM) + entry("formal", claim=FORMAL),
                                  "latent", "formal")
    withheld, formal = board.standing("latent"), board.standing("formal")
    assert withheld.audit == "" and claim_audit_label(withheld) == f"latent (clipped), {WITHHELD} for train"
    assert formal.audit == "not audited" and claim_audit_label(formal) == "m-pixel (m=1) (not audited)"
    cells = board_cells_table(board).set_index("entry")
    assert set(cells.loc["latent", "audit"]) == {""} and set(cells.loc["formal", "audit"]) == {"not audited"}
    assert "WITHHELD for train (not audited)" not in render_markdown(leaderboard)
    claims = set(report_table(pd.DataFrame(entry("latent", claim=WITHHELD_CLAIM)))["claim"])
    assert claims == {"eps=100 [latent (clipped)] (withheld for train)"}


def test_an_unbacked_mechanism_claim_is_shown_unbacked_never_as_a_formal_claim():
    leaderboard, board = board_of(entry("nominal", claim=NOMINAL) + entry("formal", claim=FORMAL), "nominal", "formal")
    nominal = board.standing("nominal")
    assert nominal.claim_type == f"m-pixel (m=1), {UNBACKED}"
    assert board.standing("formal").claim_type == "m-pixel (m=1)"
    assert any("UNBACKED" in note and "not a formal claim" in note for note in nominal.notes)
    assert nominal.audit == ""
    cells = board_cells_table(board).set_index("entry")
    assert set(cells.loc["nominal", "claim"]) == {"UNBACKED (nominal eps=3) [m-pixel (m=1)]"}
    assert f"m-pixel (m=1), {UNBACKED}" in render_markdown(leaderboard)
    claims = set(report_table(pd.DataFrame(entry("nominal", claim=NOMINAL)))["claim"])
    assert claims == {"UNBACKED (nominal eps=3) [m-pixel (m=1)]"}
    assert claim_text(3.0, "m-pixel", backed=False) == "UNBACKED ε=3 [m-pixel]"
    assert cells_frame(pd.DataFrame(entry("formal", claim=FORMAL)))["backed"].all()


def test_claim_label_reads_unbacked_as_bench_run_prints_it():
    assert claim_label(3.0, 0.0, "u", backed=False) == "UNBACKED (nominal eps=3) [u]"
    assert claim_label(3.0, 1e-5, "u", "train", backed=False) == \
        "UNBACKED (nominal eps=3, delta=1e-05) [u] (withheld for train)"


def test_legend_names_each_entry_with_its_rank_or_unranked():
    rows = entry("smoke/blur", seeds=(0, 1)) + entry("smoke/dp_pix", seeds=(0, 1))
    rows = [{**r, "mechanism": r["mechanism"].split("/")[1]} for r in rows]
    _, board = board_of(rows, "smoke/blur", "smoke/dp_pix", seeds=(0, 1))
    texts = [legend_text(s) for s in board.standings]
    assert texts == ["smoke/blur (unranked)", "smoke/dp_pix (unranked)"]
    fig, _ = frontier_figure(board)
    shown = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert shown[:2] == texts and not any(t.startswith("–") for t in shown)
    _, ranked = board_of(entry("a") + entry("b"), "a", "b")
    first = ranked.standings[0]
    assert legend_text(first) == f"{first.name} (rank 1{', tied' if first.tied else ''})"
    assert legend_text(first, scored=False).endswith(", no scored point)")


def test_privacy_spread_is_over_seeds_and_counts_within_seed_noise_once():
    scores = np.array([0.70, 0.74, 0.69])
    assert privacy_spread(scores, np.full(3, np.nan)) == pytest.approx(np.std(scores, ddof=1))
    assert privacy_spread(scores, np.full(3, 0.05)) == pytest.approx(np.std(scores, ddof=1))
    assert privacy_spread(np.array([0.5]), np.array([0.04])) == pytest.approx(0.04)
    assert math.isnan(privacy_spread(np.array([0.5]), np.array([np.nan])))


def test_the_plot_privacy_bar_uses_the_recorded_noise_only_for_one_seed():
    quiet = entry("a")
    noisy = [{**r, "privacy_score_se": 0.05} for r in quiet]
    _, quiet_board = board_of(quiet, "a")
    _, noisy_board = board_of(noisy, "a")
    bars = [[p.y_sd for p in configuration_points(board)[0]] for board in (quiet_board, noisy_board)]
    assert all(n == pytest.approx(q) for q, n in zip(*bars))
    _, board = board_of([r for r in noisy if r["seed"] == 0], "a", seeds=(0,))
    assert [p.y_sd for p in configuration_points(board)[0]] == pytest.approx([0.05] * 3)
    fig, sidecar = frontier_figure(board)
    assert [p["y_sd"] for p in sidecar["points"]] == pytest.approx([0.05] * 3)
    assert len([a for a in fig.findobj() if str(a.get_gid() or "").startswith("yerr-")]) == 3
