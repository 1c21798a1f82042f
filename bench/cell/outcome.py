"""What became of one cell (computed, found finished, or failed), and the label it is shown by."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from bench.core.registry import tasks

if TYPE_CHECKING:
    from bench.cell.plan import RunConfig
    from bench.core.result import Result


@dataclass
class CellOutcome:
    """What became of one cell.

    Attributes:
        key: The cell key.
        label: Short description.
        status: ``done`` (computed now), ``skipped`` (already finished) or ``failed``.
        run_id: The FINISHED run holding the cell's result, if any.
        seconds: Wall-clock seconds spent on it here.
        error: One line for a failed cell.
        result: The cell's result when it was computed or loaded.
    """

    key: str
    label: str
    status: str
    run_id: str | None = None
    seconds: float = 0.0
    error: str = ""
    result: "Result | None" = None


def cell_label(config: "RunConfig") -> str:
    """Returns ``task mechanism(k=v, ...) seed N`` with ``[training.epsilon=3]`` for method settings
    (the task's entry settings, or every task setting of a task that declares none: ``[arch=vgg16]``)."""
    params = ", ".join(f"{k}={v}" for k, v in config.params.items())
    prefixes = tuple(tasks.get(config.task).entry_settings) if config.task in tasks else ()
    method = ", ".join(f"{k}={v}" for k, v in (config.overrides.get("task") or {}).items()
                       if not prefixes or any(k == p or k.startswith(p + ".") for p in prefixes))
    return f"{config.task} {config.mechanism}({params}){f' [{method}]' if method else ''} seed {config.seed}"
