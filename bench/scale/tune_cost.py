"""What tuning DP-SGD settings on private data costs: the note a selected configuration carries.

``bench tune`` trains a DP-SGD model on the private training records in every trial and
keeps the configurations with the best validation numbers, so the selected configuration
depends on those records beyond what the accountant's ε covers (Papernot & Steinke 2022,
"Hyperparameter tuning with Renyi differential privacy"). The harness does not charge that
cost; it says so on the selected run (:data:`TUNING_COST_TAG`), in ``bench tune``'s output
and on the leaderboard.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["TUNING_COST_TAG", "charges_training", "tuning_cost_note"]


TUNING_COST_TAG = "bench.tuning_cost"
"""Tag of a selected test run whose DP-SGD training claim does not include the study's tuning cost."""


def tuning_cost_note(study_name: str, trials: int, searched: Any) -> str:
    """Says that a tuned DP-SGD configuration's ε leaves out the cost of tuning it.

    Every trial trained DP-SGD models on the private training records and the study kept
    the best by their validation numbers, so the selected configuration depends on those
    records beyond what the accountant's ε covers (Papernot & Steinke 2022: hyperparameter
    search on private data has a privacy cost of its own). No method here charges it.

    Args:
        study_name: The study.
        trials: Its counted trials.
        searched: The names of the searched parameters and settings.
    """
    names = ", ".join(sorted(searched)) or "nothing"
    return (f"selected by study {study_name!r} over {trials} trial(s) of DP-SGD on the private training records "
            f"(searched: {names}); the tuning cost is not in epsilon (Papernot & Steinke 2022)")


def charges_training(result: Any) -> bool:
    """Whether a cell trains with DP-SGD on its private records (its ``Result`` holds a training claim with an ε).

    Args:
        result: The cell's :class:`~bench.core.result.Result`, or None.
    """
    claim = result.training_claim if result is not None else None
    epsilon = claim.get("epsilon") if isinstance(claim, dict) else None
    return isinstance(epsilon, (int, float)) and math.isfinite(epsilon)
