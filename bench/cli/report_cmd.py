"""``bench report``: paper-style tables of the results (Markdown, LaTeX or CSV); ``--plot`` adds the frontier plots."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.cli.common import add_entries_option, add_location_args, check_locations, path_arg
from bench.errors import BenchError
from bench.storage.folders import check_writable_file, check_writable_folder

FORMATS = ("markdown", "latex", "csv")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``bench report``."""
    p = subparsers.add_parser("report", help="paper-style tables of the results (markdown, latex, csv)",
                              description="One row per configuration (mechanism, parameters, training method) and "
                                          "benchmark: utility and privacy as mean ± the half-width of a 95% CI "
                                          "(over seeds; privacy with its within-seed noise), claims typed by unit, "
                                          "the training claim beside the mechanism's. Test-split cells only; one "
                                          "table per benchmark, profile, data and number of seeds, so one-seed "
                                          "cells are never pooled with means over seeds. LaTeX: booktabs tables "
                                          "in table floats with a caption saying what ± means.")
    p.add_argument("--format", default="markdown", choices=FORMATS, help="markdown (default), latex or csv")
    p.add_argument("--benchmark", default=None, help="only this benchmark")
    p.add_argument("--profile", default=None, help="only cells of this profile")
    add_entries_option(p, "also the cells of the entry files in this folder (a committed results bundle; "
                          "./leaderboard/entries for your project's); without it the report holds local runs only")
    p.add_argument("--bundle", type=Path, default=None, metavar="FILE.json",
                   help="read the cells from this bundle (written with --cells) instead of the tracking store")
    p.add_argument("--cells", type=Path, default=None, metavar="FILE",
                   help="also write the cells behind the report: .json (a bundle, whole results: --bundle reads it), "
                        ".csv or .parquet (one flat row per cell)")
    p.add_argument("--columns", default="", metavar="NAME,...",
                   help="further columns, each mean ± 95%% CI over seeds: utility.METRIC, attack.ATTACK.METRIC or "
                        "privacy.ATTACK (e.g. utility.map_regular,attack.attribute_inference.acc_gender)")
    p.add_argument("--out", type=path_arg, default=None, help="write to this file (default: standard output)")
    p.add_argument("--plot", type=path_arg, default=None, metavar="DIR",
                   help="also write each board's frontier plot into DIR (SVG plus a JSON sidecar of its data, named "
                        "as on the site); boards are built as by 'bench leaderboard build'")
    p.add_argument("--suite", action="append", default=None, metavar="NAME|FILE",
                   help="with --plot: suites whose local cells form declared entries (repeatable; default: every "
                        "suite in bench/scale/suites/)")
    p.add_argument("--data-root", type=Path, default=None,
                   help="with --plot: root of real datasets, to expand suites on real data (default $BENCH_DATA)")
    add_location_args(p)
    p.set_defaults(func=report)


def report(args: argparse.Namespace) -> int:
    """Prints (or writes) the report."""
    import pandas as pd

    from bench.storage.tracking import Tracker
    from leaderboard.report import parse_column, report_table, to_csv_text, to_latex, to_markdown
    from leaderboard.store import Skipped, combine, read_bundle, read_entries, runs_frame, write_bundle

    for option in ("out", "cells"):
        path = getattr(args, option)
        if path is not None:
            check_writable_file(f"--{option}", path)
        if path is not None and path.is_dir():
            raise BenchError(f"--{option} {path} is a folder; name a file")
    if args.cells is not None and args.cells.suffix.lower() not in (".json", ".csv", ".parquet"):
        raise BenchError(f"--cells {args.cells}: name a .json, .csv or .parquet file")
    if args.bundle is not None and args.plot is not None:
        raise BenchError("--plot builds boards from the tracking store and entries; it cannot read --bundle")
    columns = [c.strip() for c in args.columns.split(",") if c.strip()]
    for column in columns:
        parse_column(column)
    if args.plot is not None:
        check_writable_folder("--plot", args.plot)
    check_locations(args, writing=False)
    if args.entries is not None:
        from bench.cli.leaderboard_cmd import check_entries_folder

        check_entries_folder(args)  # a folder that is not there would add no cells without a word
    skipped = Skipped()
    leaderboard = None
    if args.plot is not None:
        from bench.cli.leaderboard_cmd import collect

        leaderboard, frame, _ = collect(argparse.Namespace(**{**vars(args), "no_entries": args.entries is None}))
    elif args.bundle is not None:
        frame = read_bundle(args.bundle)
    else:
        runs = pd.DataFrame()
        if (args.results_dir / "mlflow.db").exists() or args.tracking_uri:
            runs = runs_frame(Tracker(args.results_dir, args.tracking_uri, create=False), skipped)
        entries = read_entries(args.entries, skipped)[0] if args.entries is not None else pd.DataFrame()
        frame = combine(runs, entries)
    if args.profile is not None and len(frame):
        frame = frame[frame["profile"] == args.profile].reset_index(drop=True)
    if len(frame) == 0:  # one line: why, when runs were left out (their tags gone, a result changed...)
        where = f"{args.bundle or args.results_dir}" + (f" or {args.entries}" if args.entries else "")
        raise BenchError(skipped.nothing_left(where + (f" with profile {args.profile}" if args.profile else "")))
    table = report_table(frame, args.benchmark, columns)
    if args.benchmark is not None and table.empty:
        raise BenchError(f"no finished test-split cells of benchmark {args.benchmark!r}")
    text = {"markdown": to_markdown, "latex": to_latex, "csv": to_csv_text}[args.format](table)
    for note in skipped.notes():
        print(f"[bench] warning: {note}", file=sys.stderr)
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.out.with_name(args.out.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(args.out)
    if args.cells is not None:
        chosen = frame if args.benchmark is None else frame[frame["task"] == args.benchmark]
        count = write_bundle(chosen.reset_index(drop=True), args.cells)
        print(f"[bench] cells: {count} written to {args.cells}", file=sys.stderr)
    if leaderboard is not None:
        _write_plots(leaderboard, args.plot, args.benchmark)
    return 0


def _write_plots(leaderboard, out: Path, benchmark: str | None) -> None:
    """Writes one frontier plot per board (of ``benchmark`` if given) and says where on stderr."""
    from leaderboard.plot import frontier_plot
    from leaderboard.render import board_file_name, slug

    boards = [b for b in leaderboard.boards if benchmark is None or b.key.benchmark == benchmark]
    out.mkdir(parents=True, exist_ok=True)
    for board in boards:
        path = out / f"{slug(board_file_name(board))}.svg"
        frontier_plot(board, path, png=False)
        print(f"[bench] plot: {path} ({board.key.label})", file=sys.stderr)
    if not boards:
        print(f"[bench] warning: no boards to plot (no declared entries{' of ' + benchmark if benchmark else ''}; "
              "see 'bench leaderboard show')", file=sys.stderr)
