"""``bench run``: one cell, logged to MLflow and printed."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.cli.common import (
    add_location_args,
    cache_dir,
    data_root,
    interactive,
    parse_attacks,
    parse_overrides,
    reporter,
)
from bench.params import parse_assignments


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``bench run``."""
    p = subparsers.add_parser("run", help="run one mechanism on one benchmark task and log it",
                              description="Run one cell (task x mechanism x params x seed x profile) and log it to "
                                          "MLflow. A cell that already has a FINISHED run is not computed again: its "
                                          "run is printed (--force computes it again and supersedes it).")
    p.add_argument("--mechanism", required=True, help="registered mechanism name (bench list mechanisms)")
    p.add_argument("--task", required=True, help="registered task name, e.g. fewshot_synth_faces")
    p.add_argument("--param", action="append", metavar="K=V", help="mechanism parameter (repeatable)")
    p.add_argument("--seed", type=int, default=0, help="base seed, in [0, 2^63) (default 0)")
    p.add_argument("--profile", default="quick", help="smoke | quick | paper (default quick)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (default auto)")
    p.add_argument("--data-root", type=Path, default=None, help="root of real datasets (default $BENCH_DATA)")
    p.add_argument("--verify-data", action="store_true",
                   help="fingerprint real datasets by their files' bytes, not by size and modification time")
    p.add_argument("--attacks", default=None, help="comma-separated adversaries (default: the task's; 'none' for none)")
    p.add_argument("--set", action="append", metavar="SECTION.K=V", dest="overrides",
                   help="override a task or attack setting, e.g. task.epochs=3 or face_reid.weights=PATH")
    p.add_argument("--mechanism-file", type=Path, default=None, help="a Python file that registers a mechanism")
    p.add_argument("--force", action="store_true", help="compute the cell again even if it has a FINISHED run")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines (default on a terminal outside CI)")
    p.add_argument("-v", "--verbose", action="store_true", help="progress lines even when stderr is not a terminal")
    add_location_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Validates the cell, opens the tracking store, computes (or finds) the cell and prints its table."""
    import sys

    from bench.cellrun import execute
    from bench.registry import load_file
    from bench.report import format_result
    from bench.runner import RunConfig, plan
    from bench.tracking import Tracker

    if args.mechanism_file is not None:
        load_file(args.mechanism_file)
    config = RunConfig(
        task=args.task, mechanism=args.mechanism, params=parse_assignments(args.param), seed=args.seed,
        profile=args.profile, device=args.device, data_root=data_root(args.data_root), results_dir=args.results_dir,
        cache_dir=cache_dir(args), attacks=parse_attacks(args.attacks), overrides=parse_overrides(args.overrides),
        tracking_uri=args.tracking_uri, verify_data=args.verify_data,
    )
    cell = plan(config)
    tracker = Tracker(args.results_dir, args.tracking_uri)
    log, progress = reporter(args.verbose or (interactive() and not args.quiet))
    outcome = execute(cell, tracker, force=args.force, log=log, progress=progress)
    if outcome.status == "skipped":
        print(f"cell {outcome.key} already has a FINISHED run ({outcome.run_id}); showing it "
              f"(--force computes it again)", file=sys.stderr)
    print(format_result(outcome.result, outcome.run_id, tracker.uri))
    return 0
