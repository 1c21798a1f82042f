"""``bench grid``: many cells from a suite or command-line lists; resumable."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

from bench.cli.common import (
    add_cell_options,
    cache_dir,
    check_locations,
    data_root,
    load_plugins,
    parse_attacks,
    parse_overrides,
)
from bench.errors import BenchError
from bench.system.progress import interactive


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``bench grid``."""
    p = subparsers.add_parser(
        "grid", help="run many cells (a suite or lists), skipping finished ones",
        description="Run benchmarks x mechanisms x parameters x seeds. Cells with a FINISHED MLflow run are "
                    "skipped, so a grid stopped at any moment resumes where it was.",
    )
    add_cell_args(p)
    add_executor_args(p)
    p.add_argument("--dry-run", action="store_true", help="list the cells and which are already finished; run nothing")
    p.set_defaults(func=grid)


def add_cell_args(p: argparse.ArgumentParser) -> None:
    """Adds the options that select a grid's cells and where they run: --suite and the cell options for many cells."""
    p.add_argument("--suite", default=None, help="a suite name from bench/scale/suites/ (smoke, standard) or a YAML file")
    add_cell_options(p, many=True)


def add_executor_args(p: argparse.ArgumentParser) -> None:
    """Adds --executor, --workers, --ray-address, --gpus-per-cell and -v."""
    p.add_argument("--executor", default="local", choices=("local", "processes", "ray"),
                   help="local (here), processes (one per GPU or N CPU workers), ray (a Ray cluster)")
    p.add_argument("--workers", type=int, default=None,
                   help="worker processes (processes: default one per GPU, else min(4, cores)); CPUs of a local Ray")
    p.add_argument("--ray-address", default=None, help="address of an existing Ray cluster (default: start a local one)")
    p.add_argument("--gpus-per-cell", type=int, default=1,
                   help="ray: GPUs each cell gets on one node (a data-parallel training uses them all; "
                        "8 on 8-GPU nodes runs one cell per node)")
    p.add_argument("-v", "--verbose", action="store_true", help="Ray workers print each cell's stage lines (local and processes executors always show them)")


def build_cells(args: argparse.Namespace):
    """Returns (suite, placement, cells) from the parsed options, validating every cell.

    Raises:
        BenchError: A bad suite, list or cell.
    """
    from bench.scale.grid import expand

    check_locations(args)
    load_plugins(args)
    suite = adjust_suite(select_suite(args), args)
    where = placement(args)
    return suite, where, expand(suite, where)


def select_suite(args: argparse.Namespace):
    """Returns --suite limited to --task/--mechanism, or the suite of the command-line lists.

    Raises:
        BenchError: Neither a suite nor tasks and mechanisms, or names not in the suite.
    """
    from bench.scale.grid import load_suite, suite_from_lists

    tasks, names = split_names(args.task), split_names(args.mechanism)
    if args.suite is not None:
        return load_suite(args.suite).restrict(names, tasks)
    if not tasks or not names:
        raise BenchError("give --suite NAME, or --task and --mechanism (with --param K=V1,V2 and --seeds 0,1)")
    return suite_from_lists(tasks, names, {}, [0], "quick")


def adjust_suite(suite, args: argparse.Namespace):
    """Applies --param lists, --seeds, --profile, --set and --attacks to a suite."""
    from bench.scale.grid import parse_ints, parse_value_lists

    params = parse_value_lists(args.param)
    if params:
        suite = dataclasses.replace(suite, mechanisms=tuple(
            dataclasses.replace(spec, grid={**spec.grid, **{k: tuple(v) for k, v in params.items()}},
                                zip={k: v for k, v in spec.zip.items() if k not in params})
            for spec in suite.mechanisms))
    if args.seeds is not None:
        suite = dataclasses.replace(suite, seeds=tuple(dict.fromkeys(parse_ints(args.seeds, "--seeds"))))
    if args.profile is not None:
        suite = dataclasses.replace(suite, profile=args.profile)
    extra = parse_overrides(args.overrides)
    if extra:
        merged = {k: dict(v) for k, v in suite.overrides.items()}
        for section, values in extra.items():
            merged.setdefault(section, {}).update(values)
        suite = dataclasses.replace(suite, overrides=merged)
    attacks = parse_attacks(args.attacks)
    if attacks is not None:
        suite = dataclasses.replace(suite, attacks=attacks)
    return suite


def placement(args: argparse.Namespace):
    """Returns the Placement (absolute paths, explicit tracking URI) of the parsed options."""
    from bench.scale.grid import Placement
    from bench.storage.tracking import tracking_uri

    results = args.results_dir.resolve()
    return Placement(
        results_dir=results, cache_dir=cache_dir(args).resolve(), tracking_uri=tracking_uri(results, args.tracking_uri),
        data_root=data_root(args.data_root), device=args.device, precision=args.precision,
        allow_long=getattr(args, "allow_long", False),
    )


def executor_config(args: argparse.Namespace):
    """Returns the ExecutorConfig of the parsed options, checked before anything is written.

    Raises:
        BenchError: --workers or --gpus-per-cell out of range, or --executor ray without
            Ray installed (a --dry-run, which runs nothing, does not need it).
    """
    from bench.scale.executors import ExecutorConfig

    if args.workers is not None and args.workers < 1:
        raise BenchError(f"--workers must be at least 1, got {args.workers}")
    if args.executor == "processes" and args.workers is not None:
        from bench.system.cpus import usable_cpus

        if args.workers > usable_cpus():
            raise BenchError(f"--workers {args.workers}: this machine gives this process {usable_cpus()} CPU(s), and "
                             "each worker process needs one (and holds a cell in memory); give at most that")
    if args.gpus_per_cell < 1 or (args.gpus_per_cell > 1 and args.executor != "ray"):
        raise BenchError(f"--gpus-per-cell must be at least 1 and needs --executor ray, got {args.gpus_per_cell}")
    if args.ray_address is not None and args.executor != "ray":
        raise BenchError(f"--ray-address {args.ray_address} needs --executor ray (the {args.executor} executor "
                         "would ignore it)")
    config = ExecutorConfig(kind=args.executor, workers=args.workers, ray_address=args.ray_address,
                            gpus_per_cell=args.gpus_per_cell,
                            plugin_files=tuple(p.resolve() for p in args.mechanism_file), verbose=args.verbose)
    if args.executor == "ray" and not getattr(args, "dry_run", False) and not ray_installed():
        raise BenchError("the ray executor needs Ray: pip install 'ray>=2.9' (nothing was run or written)")
    return config


def ray_installed() -> bool:
    """Whether Ray can be imported here, looked up without importing it (an import takes seconds)."""
    import importlib.util

    try:
        return importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):  # a broken or half-removed installation
        return False


def run_grid(cells, where, executor, quiet: bool = False):
    """Runs the cells that have no FINISHED run yet and returns the GridSummary.

    Args:
        cells: Validated cells.
        where: Placement: where they log.
        executor: ExecutorConfig.
        quiet: No progress output.
    """
    from bench.cell.estimate_store import grid_line
    from bench.cell.once import sweep_orphans
    from bench.scale.executors import open_tracker, run_cells, worker_count
    from bench.scale.grid import CellOutcome, GridProgress, GridSummary, pending
    from bench.system.progress import Display

    started = time.perf_counter()
    tracker = open_tracker(where.results_dir, where.tracking_uri)
    orphans = sweep_orphans(tracker)
    todo, done = pending(cells, tracker)
    handed = {c.key for c in todo}
    skipped = [CellOutcome(c.key, c.label, "skipped", done[c.key][0]) for c in cells if c.key not in handed]
    workers = worker_count(todo, executor)
    expected = expected_seconds([c for c in todo if c.key not in done], tracker)
    if not quiet:
        checks = sum(c.key in done for c in todo)
        checked = f" ({checks} finished on real data, checked against it first)" if checks else ""
        note = f"; {orphans} run(s) left by killed processes marked FAILED" if orphans else ""
        print(f"[bench] grid: {len(cells)} cells, {len(skipped)} already finished, {len(todo)} to run{checked} "
              f"({executor.kind}, {workers or 'as many as the cluster allows'} at a time){note}", file=sys.stderr,
              flush=True)
        if expected:
            print(grid_line(list(expected.values()), workers), file=sys.stderr, flush=True)
    progress = GridProgress(len(todo), interactive=interactive() and not quiet,
                            expected={k: e.seconds for k, e in expected.items()}, workers=workers)
    display = None if quiet or executor.kind == "ray" else Display(interactive=interactive())
    try:
        outcomes = run_cells(todo, executor, progress if not quiet else (lambda outcome: None), display)
    finally:
        if display is not None:
            display.close()
        progress.close()
    return GridSummary(skipped + outcomes, time.perf_counter() - started)


def expected_seconds(cells, tracker) -> dict:
    """Returns cell key -> Estimate of the cells that have one, calibrated by this machine's earlier cells.

    One query to the store per benchmark and profile (:func:`bench.cell.estimate_store.machine_factor`).
    """
    from bench.cell.estimate_store import calibrated, machine_factor

    factors: dict[tuple[str, str], tuple[float, int]] = {}
    out = {}
    for cell in cells:
        if cell.estimate is None:
            continue
        kind = (cell.config.task, cell.config.profile)
        if kind not in factors:
            factors[kind] = machine_factor(tracker, *kind)
        out[cell.key] = calibrated(cell.estimate, *factors[kind])
    return out


def grid(args: argparse.Namespace) -> int:
    """Expands and validates the cells, runs the unfinished ones and prints the summary."""
    executor = executor_config(args)
    _, where, cells = build_cells(args)
    if args.dry_run:
        return _dry_run(cells, where)
    summary = run_grid(cells, where, executor)
    print(summary.format())
    return 1 if summary.failed else 0


def _dry_run(cells, where) -> int:
    from bench.scale.grid import finished_runs, on_real_data
    from bench.storage.tracking import Tracker

    done: dict[str, list[str]] = {}
    local_db = (where.tracking_uri or "").startswith("sqlite:///")
    if not local_db or (where.results_dir / "mlflow.db").exists():
        done = finished_runs(Tracker(where.results_dir, where.tracking_uri), (c.key for c in cells))
    for cell in cells:
        print(f"{cell.key}  {'finished' if cell.key in done else 'to run  '}  {cell.label}")
    real = sum(c.key in done and on_real_data(c) for c in cells)
    checked = f" ({real} on real data: a run checks each against its data first)" if real else ""
    print(f"grid: {len(cells)} cells, {sum(c.key in done for c in cells)} finished{checked}, "
          f"{sum(c.key not in done for c in cells)} to run")
    return 0


def split_names(text: str | None) -> list[str] | None:
    """Splits a comma-separated option into names (None when not given)."""
    if text is None:
        return None
    return [part.strip() for part in text.split(",") if part.strip()]
