"""Issue 56's table of the DP-SGD board: membership at low FPR and the canary audit, per training method and seed.

Reads the FINISHED cells of ``dp_vit_synth_objects`` in a results directory (``bench.results``:
the grid of ``benchmarks/baselines.sh grid dp_vit_quick R``, finished or not) and prints one
Markdown row per cell: top-1; LiRA's and RMIA's TPR at 0.1 % and at 1 % FPR (the 1 % one with
its bootstrap interval, which re-estimates the threshold); the privacy score; the one-run
audit's lower bound on epsilon beside the claim, with the exact-plan simulation's median and
5-95 % range; what the canaries measured (epsilon and its lower confidence bound); whether the
claim is refuted; and the cell's seconds. Rows of the non-private model on clean images (the
``*_clean`` metrics every cell carries) say how far from chance the attacks get without DP.

    python benchmarks/dp_vit_board.py RESULTS_DIR [--seed 0]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import bench  # noqa: E402

TASK = "dp_vit_synth_objects"
M = "attack.membership."


def fmt(value: object, digits: int = 3) -> str:
    """Formats a number (``-`` for a missing or NaN one)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{float(value):.{digits}f}"


def tpr_cells(row: dict, attack: str, suffix: str = "") -> list[str]:
    """LiRA's or RMIA's TPR at 0.1 % and at 1 % FPR (the latter with its 95 % interval)."""
    at_1 = fmt(row.get(f"{M}{attack}.tpr_at_fpr_0.01{suffix}"))
    low, high = row.get(f"{M}{attack}.tpr_low{suffix}"), row.get(f"{M}{attack}.tpr_high{suffix}")
    if row.get(f"{M}fpr") == 0.01 and low is not None:
        at_1 += f" [{fmt(low)}, {fmt(high)}]"
    return [fmt(row.get(f"{M}{attack}.tpr_at_fpr_0.001{suffix}")), at_1]


def refuted(value: object) -> str:
    """``yes``/``no`` for the audit's verdict on the claim, ``-`` where it gave none (no claim, or no backed one)."""
    return "-" if fmt(value) == "-" else ("yes" if float(value) else "no")


def method(row: dict) -> str:
    """The training method of a cell (its claim's name, or non-private)."""
    name = row.get("training_claim.method")
    return name if isinstance(name, str) and name else "non-private"


def main() -> int:
    """Prints the table; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--seed", type=int, action="append", help="only these seeds (repeatable)")
    args = parser.parse_args()
    frame = bench.results(args.results, task=TASK, **({"seed": args.seed} if args.seed else {}))
    if not len(frame):
        print(f"no finished {TASK} cell in {args.results}", file=sys.stderr)
        return 2
    rows = sorted(frame.to_dict("records"), key=lambda r: (r["seed"], method(r)))
    head = ["training", "seed", "top-1", "LiRA @0.1%", "LiRA @1% [95%]", "RMIA @0.1%", "RMIA @1% [95%]", "privacy",
            "one-run eps >= (exact plan: median, 5-95%)", "measured eps (>= low)", "refuted", "s"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        exact = (f"{fmt(row.get(M + 'audit.epsilon_lower_bound'), 2)} ({fmt(row.get(M + 'audit.epsilon_exact'), 2)}, "
                 f"{fmt(row.get(M + 'audit.epsilon_exact_p05'), 2)}-{fmt(row.get(M + 'audit.epsilon_exact_p95'), 2)})")
        measured = (f"{fmt(row.get(M + 'audit.observed.epsilon'), 2)} "
                    f"(>= {fmt(row.get(M + 'audit.observed.epsilon_low'), 2)})")
        privacy = f"{fmt(row.get('privacy_score'), 2)} ± {fmt(row.get(M + 'privacy_se'), 2)}"
        print("| " + " | ".join([method(row), str(row["seed"]), fmt(row.get("utility.top1")),
                                 *tpr_cells(row, "lira"), *tpr_cells(row, "rmia"), privacy, exact, measured,
                                 refuted(row.get(M + "audit.refutes_claim")), f"{row['runtime_s']:.0f}"]) + " |")
    print()
    print("Without DP (the non-private model on clean images, as each seed's cells measured it):")
    print("| seed | top-1 | LiRA @0.1% | LiRA @1% [95%] | RMIA @0.1% | RMIA @1% [95%] | one-run eps >= |")
    print("|---|---|---|---|---|---|---|")
    for seed in sorted({r["seed"] for r in rows}):
        row = next(r for r in rows if r["seed"] == seed)
        print("| " + " | ".join([str(seed), fmt(row.get("utility.top1_nonprivate")), *tpr_cells(row, "lira", "_clean"),
                                 *tpr_cells(row, "rmia", "_clean"),
                                 fmt(row.get(M + "audit.epsilon_lower_bound_clean"), 2)]) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
