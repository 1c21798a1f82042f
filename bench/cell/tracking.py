"""Step 7 of a cell, tracking: its result, settings, sample sheet, tables and curves logged to its MLflow run."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.cell.plan import Plan
from bench.cell.result import CellOutput
from bench.cell.sheets import sample_sheet

if TYPE_CHECKING:
    from bench.storage.tracking import Tracker


def log_cell(tracker: "Tracker", run_id: str, output: CellOutput, planned: Plan) -> None:
    """Logs a computed cell to its RUNNING run and marks the run FINISHED."""
    configs, artifacts = cell_artifacts(output, planned)
    tracker.finish_cell(run_id, output.result, configs, artifacts, output.curves)


def cell_artifacts(output: CellOutput, planned: Plan, sample_split: str = "test",
                   samples: int = 8) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Returns what a cell's run carries besides its result: resolved configs and a sample sheet."""
    run = {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(planned.config).items()}
    configs = {
        "task": planned.task.config_dict(),
        "attacks": {name: a.config_dict() for name, a in planned.attacks.items()},
        "run": run,
    }
    split = sample_split if sample_split in output.clean else next(iter(output.clean.sets))
    clean_images = output.clean[split].images[:samples]
    released_images = output.release.splits[split].images[:samples]
    label = output.result.mechanism + "".join(f" {k}={v}" for k, v in output.result.params.items())
    with tempfile.TemporaryDirectory() as tmp:
        sheet = Path(tmp) / "samples.png"
        sample_sheet([("clean", clean_images), (label, released_images)], sheet)
        artifacts = {"samples.png": sheet.read_bytes()}
    for name, rows in output.tables.items():
        artifacts[f"{name}.csv"] = table_csv(rows)
    return configs, artifacts


def table_csv(rows: list[dict[str, Any]]) -> bytes:
    """Returns a task's table as CSV bytes (columns of the first row; numbers as Python prints them)."""
    import csv
    import io

    out = io.StringIO()
    if rows:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return out.getvalue().encode()
