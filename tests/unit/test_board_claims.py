"""What a board's claims and intervals rest on: withheld claims, within-seed privacy noise, tuned DP-SGD."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from bench.scale.tune_cost import charges_training, tuning_cost_note
from leaderboard.boards import WITHHELD, build_leaderboard
from leaderboard.cells import average_reruns, cells_frame, claim_label
from leaderboard.exports import csv_text, render_markdown, render_terminal
from leaderboard.plot_points import claim_text
from leaderboard.report import report_table
from leaderboard.stats import mean_estimate
from leaderboard.table import board_cells_table, leaderboard_table
from tests.unit.test_protocol_boards import declare, row

CURVE = [(0.80, 0.40), (0.60, 0.60), (0.40, 0.80)]
SHIFT = {0: 0.00, 1: 0.01, 2: -0.01}
LATENT = {"epsilon": 100.0, "delta": 0.0, "unit": "latent (clipped)", "withheld": ["train"],
          "note": "withheld for train: the mechanism was fitted on it (no public data)"}


def entry(name, gap=0.0, **fields):
    """Three configurations x three seeds of one entry; ``gap`` is added to every privacy score."""
    out = []
    for seed in (0, 1, 2):
        for level, (u, p) in enumerate(CURVE):
            out.append({**row(name, level, seed, u + SHIFT[seed], p + SHIFT[seed] + gap), **fields})
    return out


def board_of(rows, *names):
    leaderboard = build_leaderboard(pd.DataFrame(rows), [declare(n, levels=range(3)) for n in names])
    assert len(leaderboard.boards) == 1
    return leaderboard, leaderboard.boards[0]


def test_a_withheld_claim_is_shown_withheld_and_never_as_a_formal_claim():
    formal = {**LATENT, "withheld": [], "note": ""}
    leaderboard, board = board_of(entry("latent", claim=LATENT) + entry("fitted_public", claim=formal),
                                  "latent", "fitted_public")
    withheld, public = board.standing("latent"), board.standing("fitted_public")
    assert withheld.claim_type == f"latent (clipped), {WITHHELD} for train"
    assert public.claim_type == "latent (clipped)"
    assert any("withheld for train" in note for note in withheld.notes)
    assert not any("withheld" in note for note in public.notes)
    cells = board_cells_table(board)
    assert set(cells.loc[cells["entry"] == "latent", "claim"]) == {"eps=100 [latent (clipped)] (withheld for train)"}
    assert set(cells.loc[cells["entry"] == "fitted_public", "claim"]) == {"eps=100 [latent (clipped)]"}
    table = leaderboard_table(leaderboard).set_index("entry")
    assert table.loc["latent", "claim_type"] == withheld.claim_type and "withheld" in table.loc["latent", "notes"]
    assert "WITHHELD for train" in csv_text(leaderboard_table(leaderboard))
    assert "WITHHELD for train" in render_terminal(leaderboard)
    assert "WITHHELD for train" in render_markdown(leaderboard)
    report = report_table(pd.DataFrame(entry("latent", claim=LATENT)))
    # One status per claim (issue 43 item 4 / agentL item 10): withheld, not also "(unaudited)".
    assert set(report["claim"]) == {"eps=100 [latent (clipped)] (withheld for train)"}
    assert claim_text(100.0, "latent (clipped)", "train").startswith("withheld ε=100")


def test_claim_label_marks_withheld_splits_as_bench_run_prints_them():
    assert claim_label(100.0, 0.0, "latent (clipped)") == "eps=100 [latent (clipped)]"
    assert claim_label(100.0, 0.0, "latent (clipped)", "train") == "eps=100 [latent (clipped)] (withheld for train)"
    assert cells_frame(pd.DataFrame([row("x", 0, 0, 0.5, 0.5)]))["withheld"][0] == ""


def test_privacy_noise_within_a_seed_is_not_counted_twice():
    """Privacy 0.03-0.04 better in every seed: separated on the paired seed spread, which already holds the
    within-seed noise, so a recorded privacy standard error changes neither the comparison nor the interval."""
    gaps = {0: 0.035, 1: 0.030, 2: 0.040}
    rows_a = [r for seed, g in gaps.items() for r in entry("a", g) if r["seed"] == seed]
    _, without = board_of(rows_a + entry("b"), "a", "b")
    assert without.comparisons[("a", "b")].separated
    noisy = [{**r, "privacy_score_se": 0.10} for r in rows_a + entry("b")]
    _, with_noise = board_of(noisy, "a", "b")
    assert with_noise.comparisons[("a", "b")] == without.comparisons[("a", "b")]
    assert [s.rank for s in with_noise.standings] == [1, 2]
    assert with_noise.standing("a").estimate == without.standing("a").estimate


def test_hypervolume_intervals_stay_in_the_range_a_hypervolume_can_take():
    values = [0.002, 0.050, 0.001]
    plain = mean_estimate(values)
    assert plain.low < 0
    bounded = mean_estimate(values, bounds=(0.0, 1.0))
    assert bounded.low == 0.0 and bounded.high == pytest.approx(plain.high) and bounded.clipped
    assert not mean_estimate([0.5, 0.52, 0.49], bounds=(0.0, 1.0)).clipped
    rows = [row("low", 0, seed, 0.02, p) for seed, p in zip((0, 1, 2), (0.05, 0.90, 0.05))]
    leaderboard = build_leaderboard(pd.DataFrame(rows), [declare("low", levels=range(1))])
    standing = leaderboard.boards[0].standing("low")
    assert standing.estimate.low >= 0.0 and standing.estimate.clipped
    assert any("clipped to [0, 1]" in note for note in standing.notes)


def test_reruns_combine_privacy_errors_and_an_unknown_one_stays_unknown():
    cells = cells_frame(pd.DataFrame([
        {**row("x", 0, 0, 0.5, 0.4, run=0), "privacy_score_se": 0.06},
        {**row("x", 0, 0, 0.5, 0.6, run=1), "privacy_score_se": 0.08},
        {**row("x", 1, 0, 0.5, 0.6, run=0), "privacy_score_se": 0.08},
        {**row("x", 1, 0, 0.5, 0.6, run=1)},
    ]))
    averaged = average_reruns(cells).set_index("params_label")
    assert averaged.loc["level=0", "privacy"] == pytest.approx(0.5)
    assert averaged.loc["level=0", "privacy_se"] == pytest.approx(math.sqrt(0.06**2 + 0.08**2) / 2)
    assert math.isnan(averaged.loc["level=1", "privacy_se"])
    flagged = cells_frame(pd.DataFrame([{**row("x", 0, 0, 0.5, None), "privacy_score_se": 0.1}]))
    assert math.isnan(flagged["privacy_se"][0])


def test_dp_sgd_settings_tuned_on_private_records_say_their_cost_is_not_in_epsilon():
    training = {"epsilon": 4.8, "delta": 1e-5, "unit": "training record (DP-SGD)", "method": "DP-SGD(flat, ε=4.8)"}
    note = tuning_cost_note("study-x", 12, ["task.training.epsilon", "task.training.max_grad_norm"])
    assert "not in epsilon" in note and "Papernot & Steinke 2022" in note and "12 trial(s)" in note
    tuned = entry("tuned", training_claim=training, tuning_cost=note)
    leaderboard, board = board_of(tuned + entry("plain", training_claim=training), "tuned", "plain")
    assert board.standing("tuned").claim_type == "training record (DP-SGD), tuning cost not in ε"
    assert board.standing("plain").claim_type == "training record (DP-SGD)"
    assert any("Papernot & Steinke 2022" in n for n in board.standing("tuned").notes)
    claims = board_cells_table(board).set_index("entry")["claim"]
    assert all(c.endswith("(tuning cost not in ε)") for c in claims["tuned"])
    assert not any("tuning" in c for c in claims["plain"])
    assert "tuning cost not in ε" in render_markdown(leaderboard)


def test_only_a_dp_sgd_training_claim_is_charged():
    class Outcome:
        def __init__(self, claim):
            self.training_claim = claim

    assert charges_training(Outcome({"epsilon": 3.0}))
    assert not charges_training(Outcome(None)) and not charges_training(None)
    assert not charges_training(Outcome({"epsilon": np.inf}))


def test_tune_tags_each_selected_dp_sgd_run_and_prints_the_note(monkeypatch, tmp_path):
    """``run_selected_on_test`` tags reused and computed DP-SGD test runs alike; a cell without DP-SGD is left alone."""
    import bench.cell.plan
    import bench.scale.executors
    import bench.scale.tune as tune
    from bench.cell.plan import RunConfig
    from bench.cli.tune_cmd import format_selected
    from bench.scale.grid import CellOutcome
    from bench.scale.tune_cost import TUNING_COST_TAG

    class Result:
        def __init__(self, claim):
            self.training_claim, self.utility_value, self.privacy_score = claim, 0.5, 0.4

    tags = {}
    tracker = type("T", (), {"client": type("C", (), {"set_tag": staticmethod(
        lambda run, key, value: tags.setdefault(run, {}).update({key: value}))})()})()
    outcomes = {"3.0": CellOutcome("k1", "a", "skipped", "run-reused", result=Result({"epsilon": 3.0})),
                "8.0": CellOutcome("k2", "b", "done", "run-new", result=Result({"epsilon": 8.0})),
                "inf": CellOutcome("k3", "c", "done", "run-nonprivate", result=Result(None))}
    monkeypatch.setattr(bench.scale.executors, "open_tracker", lambda *a: tracker)
    monkeypatch.setattr(bench.scale.executors, "execute_cell",
                        lambda cell, files: outcomes[str(cell.config.overrides["task"]["training.epsilon"])])
    monkeypatch.setattr(bench.cell.plan, "plan", lambda cfg: type("P", (), {"key": "k", "mechanism": type(
        "M", (), {"config": {}})()})())
    monkeypatch.setattr(tune, "counted_trials", lambda study: 12)
    monkeypatch.setattr(tune, "pareto_rows", lambda study: [
        {"params": {"task.training.epsilon": e}, "trials": [i], "utility": 0.5, "privacy": 0.4}
        for i, e in enumerate((3.0, 8.0, "inf"))])
    config = tune.TuneConfig(RunConfig("dp_vit_synth_objects", "identity", profile="smoke", results_dir=tmp_path),
                             trials=12, study_name="s")
    selected = tune.run_selected_on_test(config, study=None)
    assert set(tags["run-reused"]) == {TUNING_COST_TAG} and TUNING_COST_TAG not in tags["run-nonprivate"]
    assert tags["run-new"][TUNING_COST_TAG] == selected[1].tuning_cost and "12 trial(s)" in selected[1].tuning_cost
    assert "task.training.epsilon" in selected[0].tuning_cost and selected[2].tuning_cost == ""
    printed = format_selected(selected, 0)
    assert printed.count("not in epsilon (Papernot & Steinke 2022)") == 1


def test_a_training_claim_shows_its_one_run_audit_and_a_refuted_one_is_typed_so():
    training = {"epsilon": 8.0, "delta": 5e-5, "unit": "training record (DP-SGD)", "method": "DP-SGD(flat, ε=8)"}
    audited = {"membership": {"audit.epsilon_lower_bound": 2.43, "audit.epsilon_ceiling": 4.52,
                              "audit.refutes_claim": 0.0}}
    refuted = {"membership": {"audit.epsilon_lower_bound": 9.1, "audit.epsilon_ceiling": 9.9,
                              "audit.refutes_claim": 1.0}}
    note = tuning_cost_note("study-x", 3, ["task.training.epsilon"])
    rows = (entry("honest", training_claim=training, attacks=audited)
            + entry("cheat", training_claim=training, attacks=refuted)
            + entry("tuned", training_claim=training, attacks=audited, tuning_cost=note))
    _, board = board_of(rows, "honest", "cheat", "tuned")
    assert board.standing("honest").claim_type == "training record (DP-SGD)"
    assert board.standing("cheat").claim_type == "training record (DP-SGD), REFUTED by its one-run audit"
    assert board.standing("tuned").claim_type == "training record (DP-SGD), tuning cost not in ε"
    claims = board_cells_table(board).set_index("entry")["claim"]
    assert all("(one-run audit: eps >= 2.43 (ceiling 4.52))" in c for c in claims["honest"])
    assert all("(REFUTED by its one-run audit: eps >= 9.1)" in c for c in claims["cheat"])
    assert all(c.endswith("(tuning cost not in ε)") and "one-run audit" in c for c in claims["tuned"])
    no_audit = entry("plain", training_claim=training, attacks={"membership": {"tpr": 0.1}})
    assert not any("audit" in c for c in cells_frame(pd.DataFrame(no_audit))["training_claim"])
