"""Declared entries: the fixed sets of configurations that a board ranks.

An entry is declared either by a suite (every configuration a suite YAML lists for one
mechanism, on its benchmarks and seeds: ``bench grid --suite NAME`` computes exactly these
cells) or by an entry file that ``bench submit`` wrote. A declaration names its cells by
cell key, so a cell counts wherever it was computed (``bench run``, a grid, another
machine), and nothing else does: other parameters, other seeds, other settings or tuning
cells are different cell keys.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from bench.errors import BenchError
from leaderboard.protocol import K_MAX, MIN_SEEDS, canonical_params

if TYPE_CHECKING:
    from bench.scale.grid import Cell, Suite

__all__ = [
    "DeclaredCell",
    "Declaration",
    "SuiteProblem",
    "declaration_block",
    "declaration_from_entry",
    "declarations_from_suite",
    "suite_declarations",
]

LOCAL = "local"
PLANNED_RESULTS = Path("results")
"""The results folder a suite's cells are planned for (their keys do not depend on it; its check does)."""


@dataclass(frozen=True)
class DeclaredCell:
    """Where a declared cell sits in its entry.

    Attributes:
        benchmark: Registered task name.
        configuration: Canonical parameters (:func:`~leaderboard.protocol.canonical_params`).
        seed: Seed.
    """

    benchmark: str
    configuration: str
    seed: int


@dataclass(frozen=True, eq=False)
class Declaration:
    """A declared entry.

    Attributes:
        name: The entry's name on boards.
        source: The rows it may claim: ``local`` (MLflow runs) or ``entry:<name>``.
        mechanism: Registered mechanism name.
        suite: The suite the configurations come from.
        profile: The profile of every cell.
        seeds: The declared seeds (only these count).
        cells: Cell key -> its place (benchmark, configuration, seed).
        unverified: Why an entry file is not verified (:mod:`leaderboard.verification`);
            empty when it is, and for a suite's local runs (checked as they are read).
        stale: Why an entry file's cells no longer describe this code (:mod:`leaderboard.staleness`);
            empty when they do.
        self_reported: Why an entry file counts as self-reported (no valid reproduction record,
            :mod:`leaderboard.reproduced`); empty when it is reproduced, and for a suite's local runs.
        reproduction: How an entry file is reproduced, or why not, in words ("" for local runs).
    """

    name: str
    source: str
    mechanism: str
    suite: str
    profile: str
    seeds: tuple[int, ...]
    cells: Mapping[str, DeclaredCell] = field(default_factory=dict)
    unverified: str = ""
    stale: str = ""
    self_reported: str = ""
    reproduction: str = ""

    def configurations(self, benchmark: str) -> list[str]:
        """Returns the declared configurations on one benchmark, in a stable order."""
        return sorted({c.configuration for c in self.cells.values() if c.benchmark == benchmark})

    def problem(self) -> str | None:
        """Returns why the declaration cannot be ranked whatever its results, or None.

        Unverified, then stale, then self-reported (an entry file neither reproduced nor pinned).
        """
        if self.unverified:
            return f"unverified: {self.unverified}"
        if self.stale:
            return f"stale: {self.stale}"
        if self.self_reported:
            return self.self_reported
        benchmarks = {c.benchmark for c in self.cells.values()}
        most = max((len(self.configurations(b)) for b in benchmarks), default=0)
        if most > K_MAX:
            return f"declares {most} configurations (an entry has at most {K_MAX})"
        if len(self.seeds) < MIN_SEEDS:
            return f"needs ≥ {MIN_SEEDS} seeds (declares {len(self.seeds)})"
        return None


def declaration_block(suite: str, profile: str, seeds: Sequence[int], cells: Iterable["Cell"]) -> dict[str, Any]:
    """Returns the ``declaration`` object of an entry file (written by ``bench submit``).

    Args:
        suite: The suite's name.
        profile: Its profile.
        seeds: Its seeds.
        cells: The validated cells of the entry (from :func:`bench.scale.grid.expand`).
    """
    listed = [{"cell_key": c.key, "benchmark": c.config.task, "seed": c.config.seed, "params": dict(c.config.params)}
              for c in cells]
    configurations = {canonical_params(c["params"]): c["params"] for c in listed}
    return {
        "suite": suite, "profile": profile, "seeds": list(seeds), "k_max": K_MAX,
        "configurations": [configurations[k] for k in sorted(configurations)],
        "cells": sorted(listed, key=lambda c: (c["benchmark"], c["seed"], canonical_params(c["params"]))),
    }


def declaration_from_entry(entry: Mapping[str, Any]) -> Declaration:
    """Reads the declaration of an entry file.

    Schema 2 files carry a ``declaration``; for schema 1 files it is inferred from the
    suite block and the cells the file holds (they were the suite's cells).

    Raises:
        BenchError: A declaration without the cells it declares.
    """
    name = str(entry["name"])
    suite = entry.get("suite") or {}
    block = entry.get("declaration")
    if block is None:
        listed = [{"cell_key": c.get("cell_key"), "benchmark": c.get("task"), "seed": c.get("seed"),
                   "params": c.get("params") or {}} for c in entry["cells"]]
        block = {"suite": suite.get("name", ""), "profile": suite.get("profile"), "seeds": suite.get("seeds"),
                 "cells": listed}
    try:
        cells = {str(c["cell_key"]): DeclaredCell(str(c["benchmark"]), canonical_params(c["params"]), int(c["seed"]))
                 for c in block["cells"]}
        seeds = tuple(int(s) for s in (block.get("seeds") or sorted({c.seed for c in cells.values()})))
    except (KeyError, TypeError, ValueError) as exc:
        raise BenchError(f"entry {name!r}: its declaration does not list cells as "
                         f"{{cell_key, benchmark, seed, params}} ({exc})") from None
    profiles = {str(c.get("profile")) for c in entry["cells"]}
    profile = str(block.get("profile") or (profiles.pop() if len(profiles) == 1 else ""))
    return Declaration(name=name, source=f"entry:{name}", mechanism=str(entry["mechanism"]),
                       suite=str(block.get("suite") or ""), profile=profile, seeds=seeds, cells=cells)


def declarations_from_suite(suite: "Suite", data_root: Path | None = None,
                            memo: dict | None = None) -> list[Declaration]:
    """Returns one local declaration per mechanism of a suite (every setting it lists for it).

    Its cells are declared at every precision its benchmarks compute at (``bench grid
    --precision bf16`` computes the suite's cells too); a bf16 cell goes to its own board.

    Args:
        suite: The suite.
        data_root: Root of real datasets (planning a cell inspects its data).
        memo: Planning shared with other suites' expansions (:func:`bench.scale.grid.expand`).

    Raises:
        BenchError: The suite does not expand (unknown names, invalid values, missing data).
    """
    from bench.core.registry import tasks
    from bench.scale.grid import Placement, expand
    from bench.system.precision import DEFAULT, PRECISIONS

    memo = {} if memo is None else memo
    cells = expand(suite, Placement(results_dir=PLANNED_RESULTS, data_root=data_root), memo)
    for mixed in (p for p in PRECISIONS if p != DEFAULT):
        able = tuple(b for b in suite.benchmarks if mixed in tasks.get(b).precisions)
        if able:
            cells += expand(dataclasses.replace(suite, benchmarks=able),
                            Placement(results_dir=PLANNED_RESULTS, data_root=data_root, precision=mixed), memo)
    by_entry: dict[tuple[str, str], dict[str, DeclaredCell]] = {}
    for cell in cells:
        cfg = cell.config
        by_entry.setdefault((cfg.mechanism, entry_label(cfg)), {})[cell.key] = DeclaredCell(
            cfg.task, canonical_params(cfg.params), cfg.seed)
    return [
        Declaration(name=f"{suite.name}/{mechanism}" + (f" + {label}" if label else ""), source=LOCAL,
                    mechanism=mechanism, suite=suite.name, profile=suite.profile, seeds=tuple(suite.seeds), cells=cells)
        for (mechanism, label), cells in by_entry.items()
    ]


def entry_label(config: Any) -> str:
    """Returns what a cell's entry-defining task settings name (``DP-SGD(flat, ε=3)``), or ``""``.

    Cells of one mechanism trained by different methods are different entries (rows) of
    one board; see :attr:`bench.core.interfaces.Task.entry_settings`.
    """
    from bench.core.registry import tasks

    task_cls = tasks.get(config.task)
    if not task_cls.entry_settings:
        return ""
    return task_cls(config.profile, dict(config.overrides.get("task") or {})).entry_label()


@dataclass(frozen=True)
class SuiteProblem:
    """A shipped suite that declares nothing on this machine.

    Attributes:
        suite: Its name.
        benchmarks: Its benchmarks (empty when the suite itself does not load).
        message: Why (one line).
    """

    suite: str
    benchmarks: tuple[str, ...]
    message: str

    def note(self) -> str:
        """Returns the problem as one line for the user."""
        return (f"suite {self.suite!r} declares no entry here, so its cells are in the exploration view: "
                f"{self.message}")


def suite_declarations(refs: Sequence[str | Path] | None = None,
                       data_root: Path | None = None) -> tuple[list[Declaration], list[SuiteProblem]]:
    """Returns the local declarations of suites, and the shipped suites that do not expand.

    The shipped suites' answer (no ``refs``, no ``data_root``) is worked out by planning
    every cell, some seconds; under the ``bench`` command it is kept for this code and read
    back while it holds (:mod:`bench.storage.derived`, :func:`_planning_stands`).

    Args:
        refs: Suite names or YAML paths; None means every suite shipped in bench/scale/suites/.
        data_root: Root of real datasets (planning a cell inspects its data).

    Raises:
        BenchError: A suite named explicitly in ``refs`` cannot be loaded or expanded.
    """
    from bench.core import registry
    from bench.scale.grid import load_suite, suite_names
    from bench.storage import derived
    from bench.system.bounds import watching

    explicit = refs is not None
    shipped = _shipped_suites() if not explicit and data_root is None and derived.is_enabled() else None
    if shipped is not None and registry.untouched() and _planning_stands():
        kept = derived.recall("suites", shipped)
        if isinstance(kept, dict) and derived.fits(kept.get("peak")):
            try:
                return _from_kept(kept)
            except (KeyError, TypeError, ValueError):
                pass
    declarations: list[Declaration] = []
    problems: list[SuiteProblem] = []
    memo: dict = {}  # suites that share a setting plan it once
    with watching() as memory:
        for ref in (refs if explicit else suite_names()):
            suite = None
            try:
                suite = load_suite(ref)
                declarations += declarations_from_suite(suite, data_root, memo)
            except BenchError as exc:
                if explicit:
                    raise
                problems.append(SuiteProblem(str(ref), tuple(suite.benchmarks) if suite else (),
                                             " ".join(str(exc).split())))
    if shipped is not None and not memory.refused and registry.only_builtins() and _planning_stands():
        derived.keep("suites", shipped, _to_kept(declarations, problems, memory.peak))
    return declarations, problems


def _shipped_suites() -> list[list[str]] | None:
    """Returns what planning the shipped suites reads besides the code: each one's name and the text it names here."""
    from bench.scale.suite import suite_names, suite_source

    try:
        return [[ref, *suite_source(ref)] for ref in suite_names()]
    except BenchError:
        return None


def _planning_stands() -> bool:
    """Whether the shipped suites' planning, kept where it was worked out, holds here and now (:mod:`bench.storage.derived`).

    Their cells are planned for ``results`` in the current folder on the CPU: the folder
    checks must pass here as they did there, and no GPU may change the device checks.
    """
    from bench.storage import derived
    from bench.storage.folders import check_writable_folder

    if not derived.no_gpu():
        return False
    try:
        check_writable_folder("--results-dir", PLANNED_RESULTS)
        check_writable_folder("--cache-dir", PLANNED_RESULTS / "cache")
    except BenchError:
        return False
    return True


def _to_kept(declarations: list[Declaration], problems: list[SuiteProblem], peak: float) -> dict[str, Any]:
    return {
        "peak": peak,
        "declarations": [{**{f.name: getattr(d, f.name) for f in dataclasses.fields(d) if f.name != "cells"},
                          "seeds": list(d.seeds),
                          "cells": [[key, c.benchmark, c.configuration, c.seed] for key, c in d.cells.items()]}
                         for d in declarations],
        "problems": [{"suite": p.suite, "benchmarks": list(p.benchmarks), "message": p.message} for p in problems],
    }


def _from_kept(kept: Mapping[str, Any]) -> tuple[list[Declaration], list[SuiteProblem]]:
    declarations = [Declaration(**{**d, "seeds": tuple(int(s) for s in d["seeds"]),
                                   "cells": {str(k): DeclaredCell(str(b), str(c), int(s)) for k, b, c, s in d["cells"]}})
                    for d in kept["declarations"]]
    problems = [SuiteProblem(str(p["suite"]), tuple(p["benchmarks"]), str(p["message"])) for p in kept["problems"]]
    return declarations, problems
