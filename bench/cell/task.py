"""Step 4 of a cell, utility: the task measured on the release, at the cell's precision."""

from __future__ import annotations

from typing import Callable

from bench.cell.plan import Plan
from bench.core.interfaces import Release, RunContext
from bench.core.splits import Splits
from bench.system import precision


def evaluate(planned: Plan, clean: Splits, released: Release, ctx: RunContext, log: Callable[[str], None]) -> dict[str, float]:
    """Returns the task's utility metrics on the release."""
    log(f"evaluating {planned.config.task}")
    with precision.using(planned.config.precision):
        return planned.task.evaluate(clean, released, ctx)
