"""``bench leaderboard build | serve | show``: the leaderboard from MLflow runs and entries."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from bench.cli.common import add_location_args
from bench.errors import BenchError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``bench leaderboard`` and its three actions."""
    p = subparsers.add_parser("leaderboard", help="build, serve or print the leaderboard",
                              description="The leaderboard of FINISHED MLflow runs plus submitted entries.")
    actions = p.add_subparsers(dest="action", metavar="ACTION", parser_class=type(p))
    actions.required = True

    build = actions.add_parser("build", help="write the static site, Markdown and CSV")
    _add_source_args(build)
    build.add_argument("--out", type=Path, default=None, help="site folder (default RESULTS_DIR/leaderboard)")
    build.set_defaults(func=build_cmd)

    serve = actions.add_parser("serve", help="serve the site on 127.0.0.1 (building it first if missing)")
    _add_source_args(serve)
    serve.add_argument("--out", type=Path, default=None, help="site folder (default RESULTS_DIR/leaderboard)")
    serve.add_argument("--port", type=int, default=8000, help="port on 127.0.0.1 (0 picks a free one; default 8000)")
    serve.add_argument("--rebuild", action="store_true", help="rebuild the site even if it exists")
    serve.set_defaults(func=serve_cmd)

    show = actions.add_parser("show", help="print the leaderboard table")
    _add_source_args(show)
    show.add_argument("--benchmark", default=None, help="only this benchmark")
    show.add_argument("--format", default="text", choices=("text", "markdown", "csv"), help="text (default), markdown or csv")
    show.set_defaults(func=show_cmd)


def _add_source_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--entries", type=Path, default=None,
                   help="folder of entry JSON files (default leaderboard/entries or $BENCH_ENTRIES)")
    p.add_argument("--no-entries", action="store_true", help="local runs only")
    p.add_argument("--profile", default=None, help="only cells of this profile")
    add_location_args(p)


def entries_dir(args: argparse.Namespace) -> Path:
    """Returns --entries, else $BENCH_ENTRIES, else the package's leaderboard/entries."""
    from leaderboard.store import ENTRIES_DIR

    if getattr(args, "entries", None) is not None:
        return args.entries
    return Path(os.environ["BENCH_ENTRIES"]) if os.environ.get("BENCH_ENTRIES") else ENTRIES_DIR


def collect(args: argparse.Namespace):
    """Returns (results DataFrame, tracker or None) from the runs and entries the options name.

    Raises:
        BenchError: There are no results at all, or an entry is malformed.
    """
    import pandas as pd

    from bench.tracking import Tracker
    from leaderboard.store import combine, entries_frame, runs_frame

    try:
        tracker = Tracker(args.results_dir, args.tracking_uri, create=False)
        runs = runs_frame(tracker, args.profile)
    except BenchError:
        tracker, runs = None, pd.DataFrame()
    entries = pd.DataFrame() if args.no_entries else entries_frame(entries_dir(args), args.profile)
    frame = combine(runs, entries)
    if len(frame) == 0:
        where = f"{args.results_dir}" + ("" if args.no_entries else f" or {entries_dir(args)}")
        raise BenchError(f"no finished cells in {where}" + (f" with profile {args.profile}" if args.profile else "")
                         + " (run 'bench grid' or 'bench run' first)")
    return frame, tracker


def build_site_from(args: argparse.Namespace) -> Path:
    """Builds the site into --out and returns the path of index.html."""
    import tempfile
    import warnings

    from leaderboard.render import build_site
    from leaderboard.store import sample_sheets

    frame, tracker = collect(args)
    out = args.out or args.results_dir / "leaderboard"
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sheets = sample_sheets(tracker, frame, tmp) if tracker is not None else {}
        index = build_site(frame, out, sheets)
    return index


def build_cmd(args: argparse.Namespace) -> int:
    """Writes the site and says where."""
    index = build_site_from(args)
    out = index.parent
    print(f"leaderboard: {index}\n  markdown: {out / 'leaderboard.md'}\n  csv: {out / 'leaderboard.csv'}")
    return 0


def serve_cmd(args: argparse.Namespace) -> int:
    """Serves the site on 127.0.0.1 until interrupted."""
    import functools
    import http.server

    out = args.out or args.results_dir / "leaderboard"
    if args.rebuild or not (out / "index.html").is_file():
        args.out = out
        build_site_from(args)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format, *values):
            pass

    try:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), functools.partial(Quiet, directory=str(out)))
    except OSError as exc:
        raise BenchError(f"cannot listen on 127.0.0.1:{args.port}: {exc.strerror or exc}") from None
    print(f"serving {out} at http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
    finally:
        server.server_close()
    return 0


def show_cmd(args: argparse.Namespace) -> int:
    """Prints the leaderboard table."""
    from leaderboard.render import csv_safe, render_markdown, render_terminal
    from leaderboard.table import leaderboard_table

    frame, _ = collect(args)
    table = leaderboard_table(frame)
    if args.benchmark is not None:
        if args.benchmark not in set(table["benchmark"]):
            known = ", ".join(sorted(set(table["benchmark"])))
            raise BenchError(f"no results for benchmark {args.benchmark!r} (benchmarks with results: {known})")
        table = table[table["benchmark"] == args.benchmark]
    if args.format == "markdown":
        print(render_markdown(table), end="")
    elif args.format == "csv":
        safe = table.apply(lambda col: col.map(lambda v: csv_safe(v) if isinstance(v, str) else v))
        safe.to_csv(sys.stdout, index=False, float_format="%.6g")
    else:
        print(render_terminal(table), end="")
    return 0
