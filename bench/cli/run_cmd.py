"""``bench run``: one cell, logged to MLflow and printed."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.cli.common import add_location_args, cache_dir, data_root, interactive, parse_overrides, reporter
from bench.params import parse_assignments


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``bench run``."""
    p = subparsers.add_parser("run", help="run one mechanism on one benchmark task and log it",
                              description="Run one cell (task x mechanism x params x seed x profile) and log it to MLflow.")
    p.add_argument("--mechanism", required=True, help="registered mechanism name (bench list mechanisms)")
    p.add_argument("--task", required=True, help="registered task name, e.g. fewshot_synth_faces")
    p.add_argument("--param", action="append", metavar="K=V", help="mechanism parameter (repeatable)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--profile", default="quick", help="smoke | quick | paper (default quick)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (default auto)")
    p.add_argument("--data-root", type=Path, default=None, help="root of real datasets (default $BENCH_DATA)")
    p.add_argument("--attacks", default=None, help="comma-separated adversaries (default: the task's; 'none' for none)")
    p.add_argument("--set", action="append", metavar="SECTION.K=V", dest="overrides",
                   help="override a task or attack setting, e.g. task.epochs=3 or face_reid.weights=PATH")
    p.add_argument("--mechanism-file", type=Path, default=None, help="a Python file that registers a mechanism")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines (default on a terminal outside CI)")
    p.add_argument("-v", "--verbose", action="store_true", help="progress lines even when stderr is not a terminal")
    add_location_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Validates the cell, computes it, logs it and prints its table."""
    from bench.registry import load_file
    from bench.report import format_result
    from bench.runner import RunConfig, log_cell, plan, run_cell
    from bench.tracking import Tracker

    if args.mechanism_file is not None:
        load_file(args.mechanism_file)
    attacks = None
    if args.attacks is not None:
        attacks = tuple(a for a in args.attacks.split(",") if a and a != "none")
    config = RunConfig(
        task=args.task, mechanism=args.mechanism, params=parse_assignments(args.param), seed=args.seed,
        profile=args.profile, device=args.device, data_root=data_root(args.data_root), results_dir=args.results_dir,
        cache_dir=cache_dir(args), attacks=attacks, overrides=parse_overrides(args.overrides),
        tracking_uri=args.tracking_uri,
    )
    cell = plan(config)
    log, progress = reporter(args.verbose or (interactive() and not args.quiet))
    output = run_cell(cell, log, progress)
    tracker = Tracker(args.results_dir, args.tracking_uri)
    run_id = log_cell(output, cell, tracker)
    print(format_result(output.result, run_id, tracker.uri))
    return 0
