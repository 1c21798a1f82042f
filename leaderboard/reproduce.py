"""``bench leaderboard verify``: recompute a seeded sample of an entry's cells and compare them with what it states.

A digest (:mod:`leaderboard.verification`) tells an entry edited after submission; only
computing a cell again tells one whose numbers were never computed. Each sampled cell is
planned from what the entry records (task, mechanism and its resolved parameters, seed,
profile, split, precision, the suite's adversaries and the cell's ``--set`` sections) by
the normal path (:func:`bench.cell.plan.plan`, then :func:`bench.cell.run.execute`, forced),
into a results directory of its own, and its numbers (:func:`bench.storage.tracking.metrics.result_metrics`,
less run times) are compared with the entry's.

Tolerance. A cell is deterministic on one machine at one precision (PyTorch's deterministic
algorithms, seeded streams), but float sums round differently on another CPU model,
thread count or GPU (the README's main job: acc 0.7569 on an AMD EPYC, 0.7667 on an Intel
Xeon). So:

- on the same hardware and versions (:func:`leaderboard.cells.hardware_label`: CPU model,
  its instruction set and torch threads, or GPU; and the same torch) every number must be
  equal (:data:`SAME_HARDWARE_TOLERANCE`);
- on other hardware a recomputed cell is another draw of its training noise (the same
  seed's data and episodes, other roundings, so another trajectory): each number must lie
  within :data:`TRAINING_Z` x sqrt(2) x the standard deviation of that number over the
  entry's own seeds of the same configuration, or within its stated 95% interval
  (``<metric>_ci95``) where that is wider; numbers with neither are not compared (and
  counted). The spread is the entry's own: an entry that states a wide spread is allowed a
  wide match, and its hypervolume's interval is as wide, so it does not rank.

The planned cell key must equal the entry's: another key means other code, settings or
data, and the cell is a mismatch without computing.
"""

from __future__ import annotations

import contextlib
import math
import random
import re
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from bench.errors import BenchError

__all__ = ["CellCheck", "SAME_HARDWARE_TOLERANCE", "TRAINING_Z", "compare", "plan_cell", "reproduce", "sample_cells",
           "seed_spread", "same_machine"]

SAME_HARDWARE_TOLERANCE = 0.0
"""Largest absolute difference allowed between a recomputed number and the entry's on the same hardware."""
TRAINING_Z = 3.0
"""Standard deviations of a difference of two training draws allowed across hardware."""
DEFAULT_SAMPLE = 2
"""Cells recomputed when ``--sample`` is not given."""


@dataclass
class CellCheck:
    """One sampled cell: recomputed, compared.

    Attributes:
        cell_key: The entry's cell key.
        label: ``task mechanism(params) seed N``.
        status: ``match``, ``mismatch`` or ``error`` (it could not be recomputed).
        tolerance: The rule it was compared under, in words.
        differences: One line per number that differs (or what went wrong).
        compared: How many numbers were compared.
        uncompared: Numbers without a stated interval, not compared on other hardware.
        run_id: The recomputed run (None when it was not computed).
        hardware: What recomputed it (:func:`leaderboard.cells.hardware_label`; "" when it was not computed).
    """

    cell_key: str
    label: str
    status: str = "match"
    tolerance: str = ""
    differences: list[str] = field(default_factory=list)
    compared: int = 0
    uncompared: int = 0
    run_id: str | None = None
    hardware: str = ""

    def lines(self) -> list[str]:
        """Returns the cell's report: one line, then its differences indented."""
        head = f"{self.status}: {self.label} (cell {self.cell_key})"
        if self.status != "error":
            head += f": {self.compared} numbers compared, {self.tolerance}"
            if self.uncompared:
                head += f"; {self.uncompared} without a stated interval not compared"
        return [head, *(f"  {line}" for line in self.differences)]


def sample_cells(cells: Sequence[Mapping[str, Any]], k: int, seed: int) -> list[Mapping[str, Any]]:
    """Returns ``k`` cells (all when fewer) drawn with a seeded generator, in a stable order.

    The draw depends only on the cells' keys and ``seed``: the same entry and seed give
    the same sample anywhere.
    """
    ordered = sorted(cells, key=lambda c: str(c.get("cell_key")))
    chosen = random.Random(seed).sample(ordered, min(k, len(ordered)))
    return sorted(chosen, key=lambda c: (str(c.get("task")), int(c.get("seed", 0)), str(c.get("cell_key"))))


def plan_cell(entry: Mapping[str, Any], cell: Mapping[str, Any], results_dir: Path, cache_dir: Path | None,
              data_root: Path | None, device: str | None, memo: dict | None = None) -> Any:
    """Plans one of an entry's cells as ``bench grid`` planned it (nothing is computed or written).

    Args:
        memo: Shared by cells planned only for their keys (:func:`bench.cell.plan.plan`).

    Raises:
        BenchError: The cell cannot be planned here (unknown names, invalid settings, missing data).
    """
    from bench.cell.plan import RunConfig, plan
    from bench.system import precision

    suite = entry.get("suite") or {}
    attacks = suite.get("attacks")
    overrides = cell.get("overrides", suite.get("overrides") or {}) or {}
    config = RunConfig(
        task=str(cell["task"]), mechanism=str(cell["mechanism"]), params=dict(cell.get("params") or {}),
        seed=int(cell["seed"]), profile=str(cell["profile"]), device=device or _device(cell), data_root=data_root,
        results_dir=results_dir, cache_dir=cache_dir, attacks=None if attacks is None else tuple(attacks),
        overrides={k: dict(v) for k, v in overrides.items()}, split=str(cell.get("eval_split") or "test"),
        precision=precision.recorded(cell.get("versions") or {}),
    )
    return plan(config, memo)


def _device(cell: Mapping[str, Any]) -> str:
    """The cell's own kind of device where this machine has it, else the CPU."""
    import torch

    return "cuda" if str(cell.get("device", "cpu")).startswith("cuda") and torch.cuda.is_available() else "cpu"


def same_machine(stated: Mapping[str, Any], computed: Mapping[str, Any]) -> bool:
    """Whether two results come from identical hardware and versions (then their numbers must be equal)."""
    from leaderboard.cells import hardware_label

    def torch_version(result: Mapping[str, Any]) -> str:
        return str((result.get("versions") or {}).get("torch", ""))

    return hardware_label(stated) == hardware_label(computed) and torch_version(stated) == torch_version(computed)


def seed_spread(entry_cells: Sequence[Mapping[str, Any]], cell: Mapping[str, Any]) -> dict[str, float]:
    """Returns each number's standard deviation over the entry's seeds of ``cell``'s configuration.

    The configuration is the task, the mechanism's parameters and the cell's ``--set``
    sections; NaN where fewer than two seeds state the number.
    """
    from bench.core.result import Result
    from bench.storage.tracking.metrics import result_metrics

    def configuration(c: Mapping[str, Any]) -> tuple:
        return (c.get("task"), repr(sorted((c.get("params") or {}).items())), repr(c.get("overrides")),
                c.get("eval_split"))

    same = [c for c in entry_cells if configuration(c) == configuration(cell)]
    values: dict[str, list[float]] = {}
    for other in same:
        for name, value in _numbers(result_metrics(Result.from_dict(other))).items():
            values.setdefault(name, []).append(value)
    return {name: (statistics.stdev(v) if len(v) > 1 else math.nan) for name, v in values.items()}


def compare(stated: Mapping[str, Any], computed: Mapping[str, Any], check: CellCheck,
            spread: Mapping[str, float] | None = None) -> None:
    """Compares two results' numbers into ``check`` under the tolerance their hardware allows.

    Args:
        stated: The entry's cell.
        computed: The recomputed result.
        check: Where the verdict and differences go.
        spread: Each number's standard deviation over the entry's seeds of this configuration
            (:func:`seed_spread`); None or NaN: only a stated interval allows a difference.
    """
    from bench.core.result import Result
    from bench.storage.tracking.metrics import result_metrics
    from leaderboard.cells import hardware_label

    same = same_machine(stated, computed)
    check.tolerance = (f"equal on the same hardware and versions ({hardware_label(stated)})" if same else
                       f"within {TRAINING_Z:g} x sqrt(2) x the entry's seed spread, or its stated 95% CI where wider: "
                       f"computed on {hardware_label(computed)}, the entry's on {hardware_label(stated)}")
    ours, theirs = (_numbers(result_metrics(Result.from_dict(r))) for r in (computed, stated))
    for name in sorted(set(ours) | set(theirs)):
        if name not in ours or name not in theirs:
            check.differences.append(f"{name}: {theirs.get(name, 'absent')} stated, {ours.get(name, 'absent')} "
                                     "recomputed")
            continue
        if same:
            allowed = SAME_HARDWARE_TOLERANCE
        else:
            sd = (spread or {}).get(name, math.nan)
            bounds = [TRAINING_Z * math.sqrt(2.0) * sd] if math.isfinite(sd) else []
            if f"{name}_ci95" in theirs and not name.endswith("_ci95"):
                bounds.append(theirs[f"{name}_ci95"])
            if not bounds:
                check.uncompared += 1
                continue
            allowed = max(bounds)
        check.compared += 1
        if not abs(ours[name] - theirs[name]) <= allowed:
            check.differences.append(f"{name}: {theirs[name]!r} stated, {ours[name]!r} recomputed (allowed ± {allowed:g})")
    for name in ("cell_key", "dataset_fingerprint"):
        if stated.get(name) != computed.get(name):
            check.differences.append(f"{name}: {stated.get(name)!r} stated, {computed.get(name)!r} recomputed")
    check.status = "mismatch" if check.differences else "match"


_DERIVED = re.compile(r"(^|\.)privacy(_score)?_se(\.|$)")
"""Standard errors of privacy scores: functions of numbers compared themselves (the attack's value, clean
value and their errors), and computed by the delta method since 2026-12 (before: the clipped interval's
width / 3.92), so a cell of either kind is compared on what it measured, not on how its error was derived."""


def _numbers(metrics: Mapping[str, float]) -> dict[str, float]:
    """The numbers a cell states, less its run times (they differ on every run) and its derived score errors."""
    return {k: v for k, v in metrics.items()
            if k != "runtime_s" and not k.startswith("runtime.") and not _DERIVED.search(k) and not math.isnan(v)}


def reproduce(entry: Mapping[str, Any], cells: Sequence[Mapping[str, Any]], results_dir: Path | None,
              cache_dir: Path | None, data_root: Path | None, device: str | None,
              say: Callable[[str], None] = print) -> list[CellCheck]:
    """Recomputes cells of an entry and compares each with what the entry states.

    Every cell is planned before any is computed, so a cell that cannot be planned here is
    reported before work starts.

    Args:
        entry: The entry (:func:`leaderboard.store.load_entry`).
        cells: The cells to recompute (:func:`sample_cells`).
        results_dir: Where to log the recomputed runs (forced: an earlier run of a cell
            there is superseded); None for a temporary folder, deleted afterwards.
        cache_dir: Releases and trained models (default: in the results directory).
        data_root: Root of real datasets.
        device: ``cpu``, ``cuda``; None for each cell's own kind where present.
        say: Where progress lines go.

    Returns:
        One check per cell, in order.
    """
    from bench.cell.run import execute, one_line
    from bench.scale.grid import cell_label
    from bench.storage.tracking import Tracker
    from leaderboard.cells import hardware_label

    with _results_folder(results_dir) as folder:
        checks, planned = [], []
        for cell in cells:
            check = CellCheck(str(cell.get("cell_key")), _label(cell))
            try:
                plan = plan_cell(entry, cell, folder, cache_dir, data_root, device)
                check.label = cell_label(plan.config)
            except BenchError as exc:
                plan = None
                check.status, check.differences = "error", [f"cannot be planned here: {exc}"]
            else:
                if plan.key != check.cell_key:
                    check.status = "mismatch"
                    check.differences = [f"cell key {plan.key} planned here, {check.cell_key} in the entry: the code "
                                         "version, settings or data differ, so its numbers are not comparable"]
                    plan = None
            checks.append(check)
            planned.append(plan)
        tracker = Tracker(folder) if any(planned) else None
        for cell, check, plan in zip(cells, checks, planned):
            if plan is None:
                continue
            say(f"[bench] verify: computing {check.label}")
            try:
                with _threads(cell):
                    outcome = execute(plan, tracker, force=True)
            except Exception as exc:  # the cell's run is marked FAILED with its traceback; the others go on
                check.status, check.differences = "error", [f"recomputing it failed: {one_line(exc)}"]
                continue
            check.run_id = outcome.run_id
            check.hardware = hardware_label(outcome.result.to_dict())
            compare(cell, outcome.result.to_dict(), check, seed_spread(entry["cells"], cell))
    return checks


def _label(cell: Mapping[str, Any]) -> str:
    params = ", ".join(f"{k}={v}" for k, v in (cell.get("params") or {}).items())
    return f"{cell.get('task')} {cell.get('mechanism')}({params}) seed {cell.get('seed')}"


@contextlib.contextmanager
def _results_folder(results_dir: Path | None) -> Iterator[Path]:
    if results_dir is not None:
        yield Path(results_dir)
        return
    with tempfile.TemporaryDirectory(prefix="bench-verify-") as tmp:
        yield Path(tmp) / "results"


@contextlib.contextmanager
def _threads(cell: Mapping[str, Any]) -> Iterator[None]:
    """Runs a CPU cell with the torch thread count it recorded, where this machine has that many CPUs.

    Reductions split by thread: the same count is what makes the same hardware give the same numbers.
    """
    import torch

    from bench.system.cpus import usable_cpus

    recorded = str((cell.get("versions") or {}).get("cpu_threads", ""))
    before = torch.get_num_threads()
    if recorded.isdigit() and 0 < int(recorded) <= usable_cpus():
        torch.set_num_threads(int(recorded))
    try:
        yield
    finally:
        torch.set_num_threads(before)
