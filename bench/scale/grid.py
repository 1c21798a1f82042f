"""Grids of cells: a suite (:mod:`bench.scale.suite`) or command-line lists expanded into validated cells.

Every cell is validated (names, parameters, settings) before any runs; a cell whose key
already has a FINISHED MLflow run is skipped, so a grid can be killed and started again.
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

from bench.cell.outcome import CellOutcome, cell_label
from bench.errors import BenchError
from bench.scale.suite import (
    MechanismSpec,
    Suite,
    load_suite,
    parse_ints,
    parse_suite,
    parse_value_lists,
    suite_from_lists,
    suite_names,
)
from bench.system.progress import duration

__all__ = [
    "Cell", "CellOutcome", "GridProgress", "GridSummary", "MechanismSpec", "Placement", "Suite", "cell_label", "expand",
    "finished_runs", "load_suite", "parse_ints", "parse_suite", "parse_value_lists", "pending", "suite_from_lists",
    "suite_names",
]
"""Suites were defined here before :mod:`bench.scale.suite`; their names stay importable from this module."""

if TYPE_CHECKING:
    from bench.cell.estimate import Estimate
    from bench.cell.plan import RunConfig
    from bench.storage.tracking import Tracker


@dataclass(frozen=True)
class Placement:
    """Where and how a grid's cells run and log (shared by every cell).

    Attributes:
        results_dir: MLflow's default database and artifacts.
        cache_dir: Releases and trained models (None: ``results_dir/cache``).
        tracking_uri: MLflow tracking URI overriding the default.
        data_root: Root of real datasets.
        device: auto, cpu, cuda or cuda:N.
        precision: fp32 or bf16 (:mod:`bench.system.precision`; part of every cell's key).
        allow_long: Run cells whose settings are estimated beyond the time bound (``--allow-long``).
    """

    results_dir: Path
    cache_dir: Path | None = None
    tracking_uri: str | None = None
    data_root: Path | None = None
    device: str = "auto"
    precision: str = "fp32"
    allow_long: bool = False


@dataclass(frozen=True)
class Cell:
    """A validated cell of a grid.

    Attributes:
        config: What the runner computes.
        key: The cell's content key.
        label: Short human description.
        estimate: How long it is expected to take (:mod:`bench.cell.estimate`).
    """

    config: "RunConfig"
    key: str
    label: str
    estimate: "Estimate | None" = None


# --- cells --------------------------------------------------------------------------------


def expand(suite: Suite, placement: Placement, memo: dict | None = None) -> list[Cell]:
    """Expands a suite into validated cells, without computing anything.

    Cells are ordered seed by seed (a grid stopped early holds whole seeds); two settings
    that resolve to the same cell (``1`` and ``1.0``) give one cell. The cells of one
    setting (task, adversaries, overrides, profile) share its planning
    (:func:`bench.cell.plan.plan`'s ``memo``; pass one to share it with other expansions).

    Raises:
        BenchError: An unknown benchmark, mechanism, attack or setting, or an invalid
            parameter value; the message names the suite entry.
    """
    from bench.cell.plan import RunConfig, plan

    cells: dict[str, Cell] = {}
    memo = {} if memo is None else memo
    for seed in suite.seeds:
        for benchmark in suite.benchmarks:
            for i, spec in enumerate(suite.mechanisms):
                for params, method in itertools.product(spec.settings(), suite.method_settings()):
                    overrides = suite.cell_overrides(method)
                    config = RunConfig(
                        task=benchmark, mechanism=spec.name, params=params, seed=seed, profile=suite.profile,
                        device=placement.device, data_root=placement.data_root, results_dir=placement.results_dir,
                        cache_dir=placement.cache_dir, attacks=suite.attacks, overrides=overrides,
                        tracking_uri=placement.tracking_uri, precision=placement.precision,
                        allow_long=placement.allow_long,
                    )
                    try:
                        planned = plan(config, memo)
                    except BenchError as exc:
                        shown = " ".join(f"{k}={v}" for k, v in {**params, **method}.items())
                        raise BenchError(f"suite {suite.name!r}: mechanisms[{i}] ({spec.name}"
                                         f"{' ' + shown if shown else ''}) on {benchmark}: {exc}") from None
                    config = dataclasses.replace(config, params=dict(planned.mechanism.config))
                    cells.setdefault(planned.key, Cell(config, planned.key, cell_label(config), planned.estimate))
    return list(cells.values())


def finished_runs(tracker: "Tracker", keys: Iterable[str]) -> dict[str, list[str]]:
    """Returns cell key -> ids of its FINISHED runs, for the given keys that have any."""
    from bench.storage.tracking import counts_as_result

    wanted = set(keys)
    found: dict[str, list[str]] = {}
    for run in _search(tracker, "attributes.status = 'FINISHED'"):
        key = run.data.tags.get("bench.cell_key")
        if key in wanted and counts_as_result(run):
            found.setdefault(key, []).append(run.info.run_id)
    return found


def pending(cells: Sequence[Cell], tracker: "Tracker") -> tuple[list[Cell], dict[str, list[str]]]:
    """Returns the cells to hand to workers, and cell key -> FINISHED run ids of the cells that have any.

    A finished cell on real data is handed over too: its worker checks the data against the
    result (:func:`bench.cell.once.data_changed`) and reports it skipped when it is unchanged.
    """
    done = finished_runs(tracker, (c.key for c in cells))
    return [c for c in cells if c.key not in done or on_real_data(c)], done


def on_real_data(cell: Cell) -> bool:
    """Whether a cell reads real data (its own dataset or ``Task.other_datasets``), which can change under a key."""
    from bench.core.interfaces import Task
    from bench.core.registry import datasets, tasks

    cfg, task_cls = cell.config, tasks.get(cell.config.task)
    if not datasets.get(task_cls.dataset).synthetic:
        return True
    if task_cls.other_datasets is Task.other_datasets:  # reads its own data only: no task to build
        return False
    task = task_cls(cfg.profile, cfg.overrides.get("task"))
    return any(not datasets.get(name).synthetic for name in task.other_datasets())


def _search(tracker: "Tracker", filter_string: str):
    token = None
    while True:
        page = tracker.client.search_runs([tracker.experiment_id], filter_string=filter_string,
                                          max_results=5000, page_token=token)
        yield from page
        token = page.token
        if not token:
            return


# --- outcomes, progress, summary ------------------------------------------------------------


class GridProgress:
    """Counts finished cells and shows a bar with an ETA (a line per cell when not on a terminal).

    The ETA comes from the cells' estimates (:mod:`bench.cell.estimate`) where they are
    given, so it covers the whole grid from the start: the estimated seconds left, times the
    elapsed time over the estimated seconds of the cells done (at the start, over the workers);
    otherwise from the mean time of the cells done.

    Args:
        total: Cells to run.
        interactive: Draw a tqdm bar instead of lines.
        expected: Cell key -> estimated seconds of the cells to run.
        workers: Cells that run at a time.
    """

    def __init__(self, total: int, interactive: bool = False, expected: dict[str, float] | None = None,
                 workers: int | None = None):
        self.total = total
        self.outcomes: list[CellOutcome] = []
        self.started = time.perf_counter()
        self.expected = dict(expected or {})
        self.workers = max(1, workers or 1)
        self._bar = None
        if interactive and total:
            from tqdm import tqdm

            self._bar = tqdm(total=total, unit="cell", desc="grid", file=sys.stderr)
            if self.expected:
                self._bar.set_postfix_str(f"ETA ~{duration(self.eta())}")

    def eta(self) -> float:
        """Returns the seconds the grid is expected to take from now."""
        elapsed = time.perf_counter() - self.started
        done = len(self.outcomes)
        if self.expected:
            finished = {o.key for o in self.outcomes}
            left = sum(v for k, v in self.expected.items() if k not in finished)
            spent = sum(self.expected.get(k, 0.0) for k in finished)
            return elapsed * left / spent if spent > 0 and elapsed > 0 else left / self.workers
        return elapsed / done * (self.total - done) if done else 0.0

    def __call__(self, outcome: CellOutcome) -> None:
        """Records one finished cell."""
        self.outcomes.append(outcome)
        failed = sum(o.status == "failed" for o in self.outcomes)
        if self._bar is not None:
            self._bar.set_postfix_str(f"failed={failed}" + (f", ETA ~{duration(self.eta())}" if self.expected else ""),
                                      refresh=False)
            self._bar.update(1)
            if outcome.status == "failed":
                self._bar.write(f"[bench] failed: {outcome.label}: {outcome.error}", file=sys.stderr)
            return
        done = len(self.outcomes)
        elapsed = time.perf_counter() - self.started
        tail = f": {outcome.error}" if outcome.error else f" ({outcome.seconds:.1f} s)"
        print(f"[bench] {done}/{self.total} {outcome.status} {outcome.label}{tail}; "
              f"elapsed {duration(elapsed)}, ETA {duration(self.eta())}", file=sys.stderr, flush=True)

    def close(self) -> None:
        """Closes the bar."""
        if self._bar is not None:
            self._bar.close()


@dataclass
class GridSummary:
    """Done / skipped / failed cells of one grid run."""

    outcomes: list[CellOutcome]
    seconds: float

    @property
    def counts(self) -> Counter:
        """Status -> number of cells."""
        return Counter(o.status for o in self.outcomes)

    @property
    def failed(self) -> list[CellOutcome]:
        """The failed cells."""
        return [o for o in self.outcomes if o.status == "failed"]

    def format(self) -> str:
        """Returns the summary: one line of counts, then one line per failed cell."""
        c = self.counts
        lines = [f"grid: {len(self.outcomes)} cells: {c['done']} done, {c['skipped']} skipped (already finished), "
                 f"{c['failed']} failed in {duration(self.seconds)}"]
        lines += [f"  failed: {o.label}: {o.error}" for o in self.failed]
        return "\n".join(lines)
