"""``bench run``: one cell, logged to MLflow and printed."""

from __future__ import annotations

import argparse

from bench.cli.common import add_cell_options, load_plugins, run_config
from bench.system.progress import interactive


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``bench run``."""
    p = subparsers.add_parser("run", help="run one mechanism on one benchmark and log it",
                              description="Run one cell (benchmark x mechanism x params x seed x profile) and log it "
                                          "to MLflow. A cell that already has a FINISHED run is not computed again: "
                                          "its run is printed (--force computes it again and supersedes it).")
    add_cell_options(p)
    p.add_argument("--verify-data", action="store_true",
                   help="fingerprint real datasets by their files' bytes, not by size and modification time")
    p.add_argument("--force", action="store_true", help="compute the cell again even if it has a FINISHED run")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar or stage lines")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="kept for old scripts: stage lines are the default off a terminal (a bar on one; with "
                        "stdout redirected from a terminal, the stage lines go to stdout too)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Validates the cell, opens the tracking store, computes (or finds) the cell and prints its table."""
    import sys

    from bench.cell.plan import plan

    load_plugins(args)
    cell = plan(run_config(args, verify_data=args.verify_data))  # a mistyped name stops here, before torch is imported

    from bench.cell.estimate_store import announce
    from bench.cell.report import format_result
    from bench.cell.run import execute
    from bench.scale.grid import cell_label
    from bench.storage.tracking import Tracker
    from bench.system.progress import Display

    tracker = Tracker(args.results_dir, args.tracking_uri)
    expected = None if args.quiet else announce(cell, tracker, force=args.force)
    if expected:
        print(expected, file=sys.stderr, flush=True)
    bars = interactive() and not args.quiet
    copy = sys.stdout if bars and not sys.stdout.isatty() else None  # `bench run > log.txt`: the log gets the stages
    with Display(interactive=bars, lines=not args.quiet, copy=copy) as display:
        emitter = display.emitter()
        emitter.start(cell_label(cell.config))
        outcome = execute(cell, tracker, force=args.force, log=emitter.log, progress=emitter.progress)
    if outcome.status == "skipped":
        print(f"cell {outcome.key} already has a FINISHED run ({outcome.run_id}); showing it "
              f"(--force computes it again)", file=sys.stderr)
    print(format_result(outcome.result, outcome.run_id, tracker.uri))
    return 0
