"""The leaderboard protocol on synthetic result rows: boards, declared entries, re-runs, ties."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from bench.core.scores import TOO_WEAK
from leaderboard.boards import RANKED, TUNING, UNDECLARED, build_leaderboard
from leaderboard.declare import Declaration, DeclaredCell, declaration_from_entry, declarations_from_suite
from leaderboard.exports import render_markdown, render_terminal
from leaderboard.pareto import hypervolume_2d
from leaderboard.protocol import K_MAX, canonical_params

TASK = "fewshot_synth_faces"
SEEDS = (0, 1, 2)
STRONG = [(0.85, 0.30), (0.75, 0.55), (0.62, 0.72), (0.45, 0.86), (0.30, 0.95)]
WEAK = [(0.78, 0.22), (0.66, 0.42), (0.52, 0.60), (0.38, 0.74), (0.22, 0.86)]


def key(entry, level, seed, profile="quick"):
    return f"{entry}-{profile}-{level}-{seed}"


def row(entry, level, seed, utility, privacy, *, run=0, split="test", profile="quick", synthetic=True,
        fingerprint="fp-synth", overrides=None, attacks=("face_reid",), cell_key=None, source="local", flags=None):
    """One result row as the store yields it (Result.to_dict() + source, run_id, overrides)."""
    return {
        "task": TASK, "dataset": "synth_faces", "mechanism": entry, "mechanism_version": 1,
        "params": {"level": level}, "seed": seed, "profile": profile,
        "utility": {"acc": utility, "acc_ci95": 0.02}, "primary_metric": "acc",
        "attacks": {a: {"top1": 0.1} for a in attacks}, "privacy": {a: privacy for a in attacks},
        "privacy_score": privacy, "privacy_flags": flags or ({} if privacy is not None else {"face_reid": TOO_WEAK}),
        "claim": None, "synthetic": synthetic, "dataset_fingerprint": fingerprint, "eval_split": split,
        "cell_key": cell_key or key(entry, level, seed, profile), "source": source,
        "run_id": f"run-{entry}-{level}-{seed}-{run}-{split}", "overrides": overrides or {},
    }


def declare(entry, levels=range(5), seeds=SEEDS, profile="quick", source="local"):
    cells = {key(entry, level, seed, profile): DeclaredCell(TASK, canonical_params({"level": level}), seed)
             for level in levels for seed in seeds}
    return Declaration(entry, source, entry, "test-suite", profile, tuple(seeds), cells)


SEED_EFFECT = {0: -0.021, 1: 0.034, 2: 0.008, 3: -0.012}
"""A seed's effect on utility, shared by every entry (same episodes, same training data order)."""


def entry_rows(entry, curve, rng, seed_sd=0.01, cell_sd=0.015, seeds=SEEDS, **extra):
    """Cells of one entry: curve + the seed's shared effect + the entry's own seed and cell noise."""
    rows = []
    for seed in seeds:
        shift = SEED_EFFECT[seed] + rng.normal(0, seed_sd)
        for level, (u, p) in enumerate(curve):
            rows.append(row(entry, level, seed, u + shift + rng.normal(0, cell_sd), p + rng.normal(0, cell_sd), **extra))
    return rows


def the_board(leaderboard):
    assert len(leaderboard.boards) == 1
    return leaderboard.boards[0]


def test_reruns_and_tune_trials_change_neither_ranking_nor_separation():
    """The issue's must-show: 20 re-runs and 4 tune trials added to a board of two clearly different entries."""
    rng = np.random.default_rng(2024)
    base = entry_rows("alpha", STRONG, rng) + entry_rows("beta", WEAK, rng)
    declarations = [declare("alpha"), declare("beta")]
    before = the_board(build_leaderboard(pd.DataFrame(base), declarations))

    reruns = [row("beta", i % 5, i % 3, WEAK[i % 5][0] + SEED_EFFECT[i % 3] + rng.normal(0, 0.015),
                  WEAK[i % 5][1] + rng.normal(0, 0.015), run=1 + i) for i in range(20)]
    trials = [row("beta", 10 + t, 0, 0.95, 0.95, split="val", cell_key=f"trial-{t}") for t in range(4)]
    after_lb = build_leaderboard(pd.DataFrame(base + reruns + trials), declarations)
    after = the_board(after_lb)

    for board in (before, after):
        assert [s.name for s in board.standings] == ["alpha", "beta"]
        assert [s.rank for s in board.standings] == [1, 2]
        assert not any(s.tied for s in board.standings)
        assert board.comparisons[("alpha", "beta")].separated
    assert after.standing("beta").runs == 15 + 20 and after.standing("beta").cells == 15
    for name in ("alpha", "beta"):
        old, new = before.standing(name).estimate, after.standing(name).estimate
        assert abs(new.mean - old.mean) < old.std, (name, old, new)
    assert after.standing("alpha").estimate == before.standing("alpha").estimate
    assert sorted(after_lb.exploration["reason"]) == [TUNING] * 4

    # Without the protocol (re-runs and trials as extra points, pooled) beta would have won.
    pooled = [(r["utility"]["acc"], r["privacy_score"]) for r in base + reruns + trials if r["mechanism"] == "beta"]
    assert hypervolume_2d(np.clip(pooled, 0, 1)) > before.standing("alpha").estimate.mean


def test_identical_frontiers_tie_however_many_reruns_one_of_them_has():
    rng = np.random.default_rng(7)
    rows = []
    for seed in SEEDS:
        shift = SEED_EFFECT[seed]
        for level, (u, p) in enumerate(WEAK):
            noise = rng.normal(0, 0.015, 2)
            rows += [row(name, level, seed, u + shift + noise[0], p + noise[1]) for name in ("same_a", "same_b")]
    rows += [row("same_b", i % 5, i % 3, WEAK[i % 5][0] + SEED_EFFECT[i % 3] + rng.normal(0, 0.03),
                 WEAK[i % 5][1] + rng.normal(0, 0.03), run=1 + i) for i in range(21)]
    board = the_board(build_leaderboard(pd.DataFrame(rows), [declare("same_a"), declare("same_b")]))
    assert [s.rank for s in board.standings] == [1, 1]
    assert all(s.tied for s in board.standings)
    assert board.standing("same_a").tied_with == ("same_b",)
    assert "This board separates none of its 2 ranked entries" in render_terminal(
        build_leaderboard(pd.DataFrame(rows), [declare("same_a"), declare("same_b")]))


def test_a_transfer_target_s_data_is_part_of_the_board_and_a_public_set_is_not():
    from leaderboard.cells import data_fingerprint

    def read(dataset, fingerprint, part="splits", synthetic=False):
        return {"dataset": dataset, "part": part, "options": {}, "fingerprint": fingerprint, "synthetic": synthetic}

    own = read("synth_scenes", "fp-synth", synthetic=True)
    base = {"dataset_fingerprint": "fp-synth"}
    assert data_fingerprint(base) == "fp-synth"  # written before reads were recorded
    assert data_fingerprint(dict(base, data_reads=[own])) == "fp-synth"
    assert data_fingerprint(dict(base, data_reads=[own, read("folder_images", "fp-t1")])) == "fp-synth+fp-t1"
    assert data_fingerprint(dict(base, data_reads=[own, read("cifar10", "fp-c", synthetic=True)])) == "fp-synth"
    assert data_fingerprint(dict(base, data_reads=[own, read("synth_scenes", "fp-pub", part="public")])) == "fp-synth"
    rng = np.random.default_rng(3)
    rows = [dict(r, data_reads=[own, read("folder_images", "fp-t1")]) for r in entry_rows("alpha", STRONG, rng)]
    rows += [dict(r, data_reads=[own, read("folder_images", "fp-t2")], cell_key="t2-" + r["cell_key"])
             for r in entry_rows("alpha", STRONG, rng)]
    declarations = [declare("alpha"), Declaration("alpha t2", "local", "alpha", "s", "quick", SEEDS, {
        "t2-" + k: v for k, v in declare("alpha").cells.items()})]
    boards = build_leaderboard(pd.DataFrame(rows), declarations).boards
    assert sorted(b.key.dataset_fingerprint for b in boards) == ["fp-synth+fp-t1", "fp-synth+fp-t2"]


def test_profiles_data_and_settings_never_share_a_board():
    rng = np.random.default_rng(1)
    rows = entry_rows("alpha", STRONG, rng)
    rows += entry_rows("alpha", STRONG, rng, profile="smoke")
    rows += [dict(r, cell_key="real-" + r["cell_key"]) for r in entry_rows("alpha", STRONG, rng, synthetic=False,
                                                                             fingerprint="fp-real")]
    rows += [dict(r, cell_key="set-" + r["cell_key"]) for r in entry_rows("alpha", STRONG, rng,
                                                                            overrides={"task": {"epochs": 3}})]
    rows += [dict(r, cell_key="atk-" + r["cell_key"]) for r in entry_rows("alpha", STRONG, rng,
                                                                            attacks=("face_reid", "denoise"))]
    declarations = [declare("alpha"), declare("alpha-smoke", profile="smoke")]
    declarations[1] = Declaration("alpha (smoke)", "local", "alpha", "s", "smoke", SEEDS,
                                  {key("alpha", lv, s, "smoke"): DeclaredCell(TASK, canonical_params({"level": lv}), s)
                                   for lv in range(5) for s in SEEDS})
    for prefix in ("real-", "set-", "atk-"):
        declarations.append(Declaration(f"alpha {prefix}", "local", "alpha", "s", "quick", SEEDS, {
            prefix + k: v for k, v in declare("alpha").cells.items()}))
    leaderboard = build_leaderboard(pd.DataFrame(rows), declarations)
    assert len(leaderboard.boards) == 5
    keys = [b.key for b in leaderboard.boards]
    assert len({k.id for k in keys}) == 5
    assert {k.profile for k in keys} == {"quick", "smoke"}
    assert {k.synthetic for k in keys} == {True, False}
    assert any('"task":{"epochs":"3"}' in k.settings for k in keys)
    assert any('"attacks":["denoise","face_reid"]' in k.settings for k in keys)
    assert all(len(b.standings) == 1 and b.standings[0].ranked for b in leaderboard.boards)
    real = next(b for b in leaderboard.boards if not b.key.synthetic)
    assert "real data" in real.key.label and "profile quick" in real.key.label
    text = render_terminal(leaderboard)
    assert "synthetic data" in text and "real data" in text and "task.epochs=3" in text


def test_only_declared_test_cells_of_declared_seeds_are_ranked():
    rng = np.random.default_rng(3)
    rows = entry_rows("alpha", STRONG, rng, seeds=(0, 1, 2, 3))
    rows.append(row("alpha", 9, 0, 0.99, 0.99))
    rows.append(row("alpha", 0, 0, 0.99, 0.99, split="val", cell_key="alpha-val-0"))
    rows.append(row("alpha", 0, 0, 0.99, 0.99, source="entry:other"))
    leaderboard = build_leaderboard(pd.DataFrame(rows), [declare("alpha")])
    standing = the_board(leaderboard).standing("alpha")
    assert standing.complete_seeds == SEEDS and standing.cells == 15 and standing.ranked
    reasons = leaderboard.exploration.set_index("run_id")["reason"]
    assert reasons["run-alpha-9-0-0-test"] == UNDECLARED
    assert reasons["run-alpha-0-0-0-val"] == TUNING
    assert sum(leaderboard.exploration["seed"] == 3) == 5
    assert set(leaderboard.exploration.loc[leaderboard.exploration["seed"] == 3, "reason"]) == {UNDECLARED}
    assert "not declared by its entry" in set(leaderboard.exploration["reason"])


def test_reruns_are_averaged_into_one_point():
    rows = entry_rows("alpha", STRONG, np.random.default_rng(4), seed_sd=0, cell_sd=0)
    for r in rows:
        r["utility"]["acc"] -= SEED_EFFECT[r["seed"]]
    rows += [row("alpha", 0, 0, STRONG[0][0] + 0.1, STRONG[0][1] - 0.1, run=1)]
    board = the_board(build_leaderboard(pd.DataFrame(rows), [declare("alpha")]))
    cell = board.cells[(board.cells["seed"] == 0) & (board.cells["configuration"] == canonical_params({"level": 0}))]
    assert len(cell) == 1
    cell = cell.iloc[0]
    assert cell["runs"] == 2
    assert cell["utility"] == pytest.approx(STRONG[0][0] + 0.05)
    assert cell["privacy"] == pytest.approx(STRONG[0][1] - 0.05)
    assert cell["utility_se"] == pytest.approx(math.sqrt(2) * 0.02 / 1.96 / 2)
    points = [(STRONG[0][0] + 0.05, STRONG[0][1] - 0.05), *STRONG[1:]]
    assert board.standing("alpha").hypervolumes[0] == pytest.approx(hypervolume_2d(points))
    assert board.standing("alpha").hypervolumes[1] == pytest.approx(hypervolume_2d(STRONG))


def test_flagged_cells_are_never_points_and_are_shown():
    rows = entry_rows("alpha", STRONG, np.random.default_rng(5), seed_sd=0, cell_sd=0)
    for r in rows:
        r["utility"]["acc"] -= SEED_EFFECT[r["seed"]]
    for r in rows:
        if r["params"]["level"] == 4:
            r.update(privacy_score=None, privacy={"face_reid": None}, privacy_flags={"face_reid": TOO_WEAK})
    leaderboard = build_leaderboard(pd.DataFrame(rows), [declare("alpha")])
    standing = the_board(leaderboard).standing("alpha")
    assert standing.flagged == 3 and standing.ranked
    assert standing.hypervolumes[0] == pytest.approx(hypervolume_2d(STRONG[:4]))
    assert "| 3 (attack too weak) |" in render_markdown(leaderboard)
    flagged = the_board(leaderboard).cells.query("flag != ''")
    assert len(flagged) == 3 and set(flagged["flag"]) == {TOO_WEAK}

    for r in rows:
        r.update(privacy_score=None, privacy={"face_reid": None}, privacy_flags={"face_reid": TOO_WEAK})
    standing = the_board(build_leaderboard(pd.DataFrame(rows), [declare("alpha")])).standing("alpha")
    assert not standing.ranked and standing.status == "attack too weak on every cell"


def test_entries_with_fewer_than_three_seeds_or_too_many_configurations_are_listed_unranked():
    rng = np.random.default_rng(6)
    rows = entry_rows("two_seeds", STRONG, rng, seeds=(0, 1)) + entry_rows("ranked", WEAK, rng)
    rows += entry_rows("incomplete", STRONG, rng)[:-1]
    many = [(0.9 - 0.04 * i, 0.1 + 0.04 * i) for i in range(K_MAX + 1)]
    rows += entry_rows("many", many, rng)
    declarations = [declare("two_seeds", seeds=(0, 1)), declare("ranked"), declare("incomplete"),
                    declare("many", levels=range(K_MAX + 1))]
    board = the_board(build_leaderboard(pd.DataFrame(rows), declarations))
    assert [s.name for s in board.standings] == ["ranked", "incomplete", "many", "two_seeds"]
    assert board.standing("ranked").rank == 1
    assert board.standing("two_seeds").status == "needs ≥ 3 seeds (declares 2)"
    assert board.standing("incomplete").status == "needs ≥ 3 seeds (2 complete)"
    assert board.standing("incomplete").complete_seeds == (0, 1)
    assert board.standing("many").status == f"declares {K_MAX + 1} configurations (an entry has at most {K_MAX})"
    assert all(s.rank is None for s in board.standings[1:])


def test_an_entry_file_declares_only_its_own_cells():
    cells = [row("mine", level, seed, u, p, source="entry:mine") for level, (u, p) in enumerate(STRONG) for seed in SEEDS]
    legacy = {"schema": 1, "name": "mine", "mechanism": "mine", "cells": cells,
              "suite": {"name": "standard", "profile": "quick", "seeds": list(SEEDS)}}
    declaration = declaration_from_entry(legacy)
    assert declaration.source == "entry:mine" and declaration.seeds == SEEDS and len(declaration.cells) == 15
    assert declaration.configurations(TASK) == sorted(canonical_params({"level": lv}) for lv in range(5))
    block = {"suite": "standard", "profile": "quick", "seeds": [0, 1, 2],
             "cells": [{"cell_key": c["cell_key"], "benchmark": TASK, "seed": c["seed"], "params": c["params"]}
                       for c in cells if c["params"]["level"] < 3]}
    declared = declaration_from_entry({**legacy, "schema": 2, "declaration": block})
    assert len(declared.cells) == 9
    leaderboard = build_leaderboard(pd.DataFrame(cells), [declared])
    assert the_board(leaderboard).standing("mine").configurations == 3
    assert len(leaderboard.exploration) == 6


def test_a_suite_declares_one_entry_per_mechanism_by_cell_key():
    from bench.scale.grid import MechanismSpec, Suite

    suite = Suite(name="mini", profile="smoke", seeds=(0, 1, 2), benchmarks=(TASK,),
                  mechanisms=(MechanismSpec("pixelate", {"block": (4, 8)}), MechanismSpec("identity")))
    declarations = {d.name: d for d in declarations_from_suite(suite)}
    assert set(declarations) == {"mini/pixelate", "mini/identity"}
    pixelate = declarations["mini/pixelate"]
    assert len(pixelate.cells) == 12 and pixelate.seeds == (0, 1, 2) and pixelate.profile == "smoke"  # fp32 and bf16
    assert pixelate.problem() is None
    from bench.cell.plan import RunConfig, plan

    planned = plan(RunConfig(task=TASK, mechanism="pixelate", params={"block": "8"}, seed=2, profile="smoke"))
    assert pixelate.cells[planned.key] == DeclaredCell(TASK, canonical_params({"block": 8}), 2)
    forced = plan(RunConfig(task=TASK, mechanism="pixelate", params={"block": 8}, seed=2, profile="smoke",
                            overrides={"task": {"epochs": "1"}}))
    assert forced.key not in pixelate.cells
    mixed = plan(RunConfig(task=TASK, mechanism="pixelate", params={"block": 8}, seed=2, profile="smoke",
                           precision="bf16"))
    assert pixelate.cells[mixed.key] == DeclaredCell(TASK, canonical_params({"block": 8}), 2)


def test_a_suite_s_bf16_cells_are_declared_only_for_benchmarks_that_compute_at_bf16():
    from bench.cell.plan import RunConfig, plan
    from bench.scale.grid import MechanismSpec, Suite

    other = "dp_vit_synth_objects"
    suite = Suite(name="two", profile="smoke", seeds=(0,), benchmarks=(TASK, other),
                  mechanisms=(MechanismSpec("identity"),))
    cells = {key: cell for declared in declarations_from_suite(suite) for key, cell in declared.cells.items()}
    assert len(cells) == 3
    for task, precision in ((TASK, "fp32"), (TASK, "bf16"), (other, "fp32")):
        assert plan(RunConfig(task=task, mechanism="identity", profile="smoke", precision=precision)).key in cells


def test_rows_of_an_entry_and_a_ranked_status_line_in_every_export():
    rng = np.random.default_rng(8)
    rows = entry_rows("alpha", STRONG, rng) + entry_rows("beta", WEAK, rng)
    leaderboard = build_leaderboard(pd.DataFrame(rows), [declare("alpha"), declare("beta")])
    text = render_terminal(leaderboard)
    lines = text.splitlines()
    assert lines[0].startswith(f"{TASK} · profile quick · synthetic data")
    assert lines[2].split()[:2] == ["1", "alpha"] and lines[3].split()[:2] == ["2", "beta"]
    assert RANKED in lines[2]


def test_two_declarations_with_one_name_stay_two_entries():
    rng = np.random.default_rng(9)
    rows = entry_rows("alpha", STRONG, rng) + [dict(r, source="entry:alpha") for r in entry_rows("alpha", WEAK, rng)]
    declarations = [declare("alpha"), declare("alpha", source="entry:alpha")]
    board = the_board(build_leaderboard(pd.DataFrame(rows), declarations))
    assert sorted(s.name for s in board.standings) == ["alpha [entry:alpha]", "alpha [local]"]
    assert board.standing("alpha [local]").estimate.mean > board.standing("alpha [entry:alpha]").estimate.mean


def test_bf16_cells_are_never_pooled_or_titled_with_fp32_ones():
    """Boards, their Markdown, the exploration list and the paper report keep the precisions apart."""
    from leaderboard.exports import render_exploration
    from leaderboard.plot import data_mark
    from leaderboard.report import report_table, to_markdown

    def mixed(r):
        return {**r, "versions": {"precision": "bf16"}, "cell_key": "bf16-" + r["cell_key"],
                "run_id": "bf16-" + r["run_id"], "utility": {"acc": r["utility"]["acc"] - 0.2, "acc_ci95": 0.02}}

    rng = np.random.default_rng(7)
    full = entry_rows("alpha", STRONG, rng)
    declared = declare("alpha")
    both = Declaration("alpha", "local", "alpha", "test-suite", "quick", tuple(SEEDS),
                       {**declared.cells, **{"bf16-" + k: c for k, c in declared.cells.items()}})
    leaderboard = build_leaderboard(pd.DataFrame(full + [mixed(r) for r in full]), [both])
    assert len(leaderboard.boards) == 2
    assert [b.key.precision for b in leaderboard.boards].count("bf16") == 1
    assert render_markdown(leaderboard).count("· bf16 mixed precision ·") == 1
    assert sorted(data_mark(b) for b in leaderboard.boards) == [
        "SYNTHETIC DATA · profile quick", "SYNTHETIC DATA · profile quick · bf16 mixed precision"]

    explored = [row("beta", 0, 0, 0.5, 0.4), mixed(row("beta", 0, 0, 0.5, 0.4))]
    text = render_exploration(build_leaderboard(pd.DataFrame(explored), []))
    assert text.count("exploration, not ranked") == 2 and text.count("bf16 mixed precision") == 1

    report = report_table(pd.DataFrame(full + [mixed(r) for r in full]))
    assert sorted(report["precision"]) == ["bf16"] * 5 + ["fp32"] * 5
    gap = report[report["precision"] == "fp32"]["utility"].to_numpy() - report[report["precision"] == "bf16"][
        "utility"].to_numpy()
    assert np.allclose(gap, 0.2)  # each row pools its own precision's seeds only
    assert to_markdown(report).count("bf16 mixed precision") == 1
