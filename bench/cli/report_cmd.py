"""``bench report``: paper-style tables of the results (Markdown, LaTeX or CSV)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.cli.common import add_location_args
from bench.errors import BenchError

FORMATS = ("markdown", "latex", "csv")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``bench report``."""
    p = subparsers.add_parser("report", help="paper-style tables of the results (markdown, latex, csv)",
                              description="One row per configuration (mechanism, parameters, training method) and "
                                          "benchmark: utility as mean ± 95%% CI over seeds, privacy as mean (sd), "
                                          "claims typed by unit, the training claim beside the mechanism's. "
                                          "Test-split cells only; one table per benchmark, profile and data.")
    p.add_argument("--format", default="markdown", choices=FORMATS, help="markdown (default), latex or csv")
    p.add_argument("--benchmark", default=None, help="only this benchmark")
    p.add_argument("--profile", default=None, help="only cells of this profile")
    p.add_argument("--entries", type=Path, default=None,
                   help="also the cells of the entry files in this folder (a committed results bundle)")
    p.add_argument("--out", type=Path, default=None, help="write to this file (default: standard output)")
    add_location_args(p)
    p.set_defaults(func=report)


def report(args: argparse.Namespace) -> int:
    """Prints (or writes) the report."""
    import pandas as pd

    from bench.tracking import Tracker
    from leaderboard.report import report_table, to_csv_text, to_latex, to_markdown
    from leaderboard.store import Skipped, combine, read_entries, runs_frame

    if args.out is not None and args.out.is_dir():
        raise BenchError(f"--out {args.out} is a folder; name a file")
    skipped = Skipped()
    runs = pd.DataFrame()
    if (args.results_dir / "mlflow.db").exists() or args.tracking_uri:
        runs = runs_frame(Tracker(args.results_dir, args.tracking_uri, create=False), skipped)
    entries = read_entries(args.entries, skipped)[0] if args.entries is not None else pd.DataFrame()
    frame = combine(runs, entries)
    if args.profile is not None and len(frame):
        frame = frame[frame["profile"] == args.profile].reset_index(drop=True)
    if len(frame) == 0:
        raise BenchError(f"no finished cells in {args.results_dir}" + (f" or {args.entries}" if args.entries else "")
                         + " (run 'bench run' or 'bench grid' first)")
    table = report_table(frame, args.benchmark)
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
    return 0
