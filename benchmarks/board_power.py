"""What each shipped board can separate: rank levels, minimum detectable difference, A/A and A/B checks (issue 55).

Reads the shipped entries (``leaderboard/entries/*.json``; nothing is computed or planned) and
prints, per board: ranked entries and distinct rank levels, whether the no-protection entry
(identity) is separated from the best, the pooled sd of per-seed hypervolume differences,
the minimum detectable difference (MDD) at 80% power with the board's seeds and with 5 and 10,
the A/A false-separation rate (twins of every ranked entry on independent seeds, paired and on
disjoint seeds) and the A/B power at the MDD (normal differences and the board's own
residuals resampled). Same seed, same numbers.

    .venv/bin/python benchmarks/board_power.py [--repetitions 1000] [--entries DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from leaderboard.calibration import (  # noqa: E402
    ab_power,
    boards_of_entries,
    entry_points,
    false_separation_rate,
    pooled_residuals,
)
from leaderboard.stats import minimum_detectable_difference  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """Prints the table; returns 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=1000, help="simulated pairs per entry (A/A) and in all (A/B)")
    parser.add_argument("--entries", type=Path, default=ROOT / "leaderboard" / "entries", help="folder of entry files")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(55)
    boards = boards_of_entries(sorted(args.entries.glob("*.json")))
    print("| board | ranked | levels | identity vs best | sd of per-seed differences | MDD (3 / 5 / 10 seeds) "
          "| A/A paired (3 / 5 seeds) | A/A disjoint seeds (3 / 5) | A/B power at MDD (normal / residuals) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, board in sorted(boards.items()):
        ranked = board.ranked
        identity = [s for s in ranked if s.mechanism == "identity" and "DP-SGD" not in s.name]
        separated = "–"
        if identity and identity[0] is not ranked[0]:
            comparison = board.comparisons[(ranked[0].name, identity[0].name)]
            separated = f"{'separated' if comparison.separated else 'not separated'} (p = {comparison.pvalue:.3g})"
        power = board.power
        mdd = [minimum_detectable_difference(power.difference_sd, n) for n in (power.seeds, 5, 10)]
        rates = {}
        for paired in (True, False):
            for seeds in (3, 5):
                values = [false_separation_rate(entry_points(board, s.name), seeds, args.repetitions, rng,
                                                paired=paired) for s in ranked]
                rates[(paired, seeds)] = float(np.mean(values))
        normal = ab_power(power.detectable, power.seeds, args.repetitions, rng, sd=power.difference_sd)
        residual = ab_power(power.detectable, power.seeds, args.repetitions, rng,
                            residuals=pooled_residuals({s.name: s.hypervolumes for s in ranked}))
        print(f"| {name} | {len(ranked)} | {board.levels} | {separated} | {power.difference_sd:.3f} | "
              f"{' / '.join(f'{m:.3f}' for m in mdd)} | {rates[(True, 3)]:.3f} / {rates[(True, 5)]:.3f} | "
              f"{rates[(False, 3)]:.3f} / {rates[(False, 5)]:.3f} | {normal:.3f} / {residual:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
