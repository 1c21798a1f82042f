"""``bench runs``: the runs of a results directory, newest first, with filters."""

from __future__ import annotations

import argparse
import json

from bench.cli.common import add_location_args, check_locations, text_arg

ID_WIDTH = 12
"""Characters of a run id shown: a prefix ``bench show`` takes while it is unique."""
NAMED = 5
"""UNVERIFIED runs whose reason is printed, one line each; further ones are counted in one line."""
STATUSES = ("running", "finished", "failed", "killed")
"""The run statuses ``--status`` takes (MLflow's, lower case)."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``bench runs`` (importing nothing heavy: ``bench --help`` stays fast)."""
    p = subparsers.add_parser("runs", help="list logged runs (newest first), with filters",
                              description="Lists the runs of RESULTS_DIR's store, newest first: id (a prefix 'bench "
                                          "show' takes), status, start, name, utility and privacy score. Superseded "
                                          "runs show as SUPERSEDED; a finished run whose result.json does not match the "
                                          "digest logged with it as UNVERIFIED, without numbers, and why on stderr. The "
                                          "numbers are the verified result's, as 'bench show' prints them.")
    p.add_argument("--benchmark", "--task", dest="benchmark", type=text_arg, default=None, help="only this benchmark")
    p.add_argument("--mechanism", type=text_arg, default=None, help="only this mechanism")
    p.add_argument("--status", type=str.lower, choices=STATUSES, default=None, help="only runs with this status")
    p.add_argument("--since", type=text_arg, default=None,
                   help="only runs started since: 30m, 12h, 3d, 2w ago, or a date/time (2026-11-28T09:00, local)")
    p.add_argument("--limit", type=int, default=50, help="most runs listed (default 50; 0: all)")
    p.add_argument("--json", action="store_true", help="one JSON object per line instead of the table")
    add_location_args(p)
    p.set_defaults(func=runs)


def runs(args: argparse.Namespace) -> int:
    """Prints the matching runs (and how many more there are beyond --limit)."""
    import sys

    from bench.errors import BenchError
    from bench.storage.tracking import Tracker
    from bench.storage.tracking.lookup import filter_string, parse_since, run_row, search

    if args.limit < 0:
        raise BenchError(f"--limit must be 0 (all) or more, got {args.limit}")
    since = parse_since(args.since) if args.since is not None else None
    check_locations(args, writing=False)
    tracker = Tracker(args.results_dir, args.tracking_uri, create=False)
    rows = [run_row(r) for r in search(tracker, filter_string(args.benchmark, args.mechanism, args.status, since))]
    shown = rows if args.limit == 0 else rows[:args.limit]
    unverified = [f"{row['run_id']}: {why}" for row in shown if (why := verified_numbers(tracker, row))]
    if args.json:
        for row in shown:
            print(json.dumps(row, sort_keys=True))
    elif shown:
        print(format_rows(shown))
    if not rows:
        print("no runs match" + ("" if args.json else f" in {tracker.uri}"), file=sys.stderr)
    elif len(rows) > len(shown):
        print(f"... {len(rows) - len(shown)} more (--limit 0 lists all)", file=sys.stderr)
    for line in unverified[:NAMED]:
        print(f"[bench] UNVERIFIED {line}", file=sys.stderr)
    if len(unverified) > NAMED:
        print(f"[bench] UNVERIFIED: {len(unverified) - NAMED} more run(s) ('bench show RUN' says why of each)",
              file=sys.stderr)
    return 0


def verified_numbers(tracker, row: dict) -> str:
    """Puts a FINISHED run's numbers from its verified result.json into ``row``, as ``bench show`` reads them.

    The tracking database's metrics are a copy that can be edited; the result.json checked
    against the digest logged with it is what ``show``, the board and ``report`` read, so
    ``runs`` shows the same numbers, or none.

    Returns:
        "" when verified (or not a finished run), else why not (the row's status becomes ``UNVERIFIED``).
    """
    from bench.errors import BenchError
    from bench.storage.tracking.verify import UnverifiedResult

    if row["status"] not in ("FINISHED", "SUPERSEDED"):
        return ""
    try:
        result = tracker.load_result(row["run_id"])
    except UnverifiedResult as exc:
        row.update(status="UNVERIFIED", utility=None, privacy_score=None)
        return exc.reason
    except BenchError as exc:
        row.update(status="UNVERIFIED", utility=None, privacy_score=None)
        return str(exc)
    row.update(utility=result.utility.get(result.primary_metric), privacy_score=result.privacy_score,
               runtime_s=result.runtime_s)
    return ""


def format_rows(rows: list[dict]) -> str:
    """Returns the runs as an aligned text table."""
    header = ["RUN", "STATUS", "STARTED", "UTILITY", "PRIVACY", "SECONDS", "NAME"]
    lines = [[r["run_id"][:ID_WIDTH], r["status"], r["started"], _number(r["utility"]), _number(r["privacy_score"]),
              _number(r["runtime_s"], ".0f"), f"{r['name']} [{r['profile']}]" if r["profile"] else r["name"]]
             for r in rows]
    widths = [max(len(line[i]) for line in [header, *lines]) for i in range(len(header) - 1)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line[:-1], widths)) + "  " + line[-1]
                     for line in [header, *lines])


def _number(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)
