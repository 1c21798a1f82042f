"""``bench show RUN_ID|CELL_KEY``: print a logged cell (a unique prefix of either is enough)."""

from __future__ import annotations

import argparse

from bench.cli.common import add_location_args


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``bench show``."""
    p = subparsers.add_parser("show", help="print the result of a logged run (by run id or cell key, or a unique prefix)",
                              description="Prints a run's result. RUN_ID|CELL_KEY may be a unique prefix of either "
                                          "(bench runs lists the runs); a prefix of several runs lists them.")
    p.add_argument("run_id", metavar="RUN_ID|CELL_KEY")
    p.add_argument("--json", action="store_true", help="print result.json instead of the table")
    add_location_args(p)
    p.set_defaults(func=show)


def show(args: argparse.Namespace) -> int:
    """Loads a run's result.json from MLflow and prints it."""
    from bench.cell.report import format_result
    from bench.storage.tracking import Tracker

    tracker = Tracker(args.results_dir, args.tracking_uri, create=False)
    run_id = tracker.find_run(args.run_id)
    result = tracker.load_result(run_id)
    print(result.to_json() if args.json else format_result(result, run_id, tracker.uri))
    return 0
