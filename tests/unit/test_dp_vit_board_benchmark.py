"""benchmarks/dp_vit_board.py: issue 56's table, one row per finished cell, read from the results frame."""

from __future__ import annotations

import math
import sys

import pandas as pd
from conftest import load_benchmark  # tests/conftest.py: benchmarks/ is loaded by path

M = "attack.membership."


def row(method, seed, refutes, **extra):
    return {"seed": seed, "training_claim.method": method, "utility.top1": 0.3, "utility.top1_nonprivate": 0.5,
            "runtime_s": 12.0, "privacy_score": 0.9, f"{M}privacy_se": 0.05, f"{M}fpr": 0.01,
            f"{M}lira.tpr_at_fpr_0.001": 0.002, f"{M}lira.tpr_at_fpr_0.01": 0.02, f"{M}lira.tpr_low": 0.01,
            f"{M}lira.tpr_high": 0.03, f"{M}rmia.tpr_at_fpr_0.001": 0.001, f"{M}rmia.tpr_at_fpr_0.01": 0.015,
            f"{M}lira.tpr_at_fpr_0.01_clean": 0.15, f"{M}audit.refutes_claim": refutes, **extra}


def test_rows_say_the_verdict_only_where_the_audit_gave_one(monkeypatch, capsys):
    board = load_benchmark("dp_vit_board")
    frame = pd.DataFrame([row("DP-SGD(flat, ε=1)", 0, 0.0, **{f"{M}audit.observed.epsilon": 1.05}),
                          row("DP-SGD(flat, ε=8)", 0, 1.0),
                          row(math.nan, 0, math.nan)])  # the non-private cell: no claim, no verdict
    monkeypatch.setattr(board.bench, "results", lambda source, **filters: frame)
    monkeypatch.setattr(sys, "argv", ["dp_vit_board.py", "results"])
    assert board.main() == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split(" | ")[0].lstrip("| "): line for line in lines[2:5]}
    assert rows["DP-SGD(flat, ε=1)"].endswith("| no | 12 |") and "| 1.05 (>= -) |" in rows["DP-SGD(flat, ε=1)"]
    assert rows["DP-SGD(flat, ε=8)"].endswith("| yes | 12 |")
    assert rows["non-private"].endswith("| - | 12 |")
    assert "| 0.020 [0.010, 0.030] |" in rows["DP-SGD(flat, ε=1)"]  # TPR at 1 % FPR with its interval
    assert lines[-1].startswith("| 0 | 0.500 | - | 0.150 |")  # the seed's non-private model on clean images


def test_no_finished_cell_is_one_line_and_exit_2(monkeypatch, capsys):
    board = load_benchmark("dp_vit_board")
    monkeypatch.setattr(board.bench, "results", lambda source, **filters: pd.DataFrame())
    monkeypatch.setattr(sys, "argv", ["dp_vit_board.py", "empty"])
    assert board.main() == 2
    assert capsys.readouterr().err.strip() == "no finished dp_vit_synth_objects cell in empty"
