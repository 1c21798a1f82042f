"""``bench leaderboard build | serve | show | verify``: the leaderboard from MLflow runs and entries."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from bench.cli.common import (
    add_allow_long_option,
    add_entries_option,
    add_location_args,
    check_locations,
    data_root,
    path_arg,
)
from bench.errors import BenchError
from leaderboard.reproduce import DEFAULT_SAMPLE


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``bench leaderboard`` and its four actions."""
    p = subparsers.add_parser("leaderboard", help="build, serve or print the leaderboard",
                              description="Boards of declared entries (suites' local runs and submitted entries) ranked by "
                                          "docs/protocol.md; other cells are in the exploration view.")
    actions = p.add_subparsers(dest="action", metavar="ACTION", parser_class=type(p))
    actions.required = True

    build = actions.add_parser("build", help="write the static site, Markdown and CSV")
    _add_source_args(build)
    build.add_argument("--out", type=path_arg, default=None, help="site folder (default RESULTS_DIR/leaderboard)")
    build.set_defaults(func=build_cmd)

    serve = actions.add_parser("serve", help="serve the site on 127.0.0.1 (building it first if missing)")
    _add_source_args(serve)
    serve.add_argument("--out", type=path_arg, default=None, help="site folder (default RESULTS_DIR/leaderboard)")
    serve.add_argument("--port", type=int, default=8000, help="port on 127.0.0.1 (0 picks a free one; default 8000)")
    serve.add_argument("--rebuild", action="store_true", help="rebuild the site even if it exists")
    serve.set_defaults(func=serve_cmd)

    show = actions.add_parser("show", help="print the leaderboard table")
    _add_source_args(show)
    show.add_argument("--benchmark", default=None, help="only this benchmark")
    show.add_argument("--format", default="text", choices=("text", "markdown", "csv"), help="text (default), markdown or csv")
    show.add_argument("--exploration", action="store_true",
                      help="print the cells outside declared entries (single runs, ad-hoc grids, tuning trials)")
    show.set_defaults(func=show_cmd)

    verify = actions.add_parser(
        "verify", help="recompute a random sample of an entry's cells and compare them with what it states",
        description="Checks ENTRY as the board does (mechanism registered, cells matching their result digests, "
                    "claims with a passed audit), then recomputes a seeded random sample of its cells by the normal "
                    "cell path and compares each number with the entry's: equal on the same hardware (CPU model "
                    "and threads, or GPU), within the cell's stated 95% CI on other hardware. Exit 0 when the "
                    "entry is verified and every sampled cell matches, 1 otherwise, 2 on a usage error.")
    verify.add_argument("entry", type=path_arg, metavar="ENTRY",
                        help="an entry JSON file, or the name (or file stem) of an entry in the entries folder or of a "
                             "shipped baseline")
    add_entries_option(verify, "where to look up ENTRY by name (default ./leaderboard/entries or $BENCH_ENTRIES, "
                               "then the shipped baselines)")
    verify.add_argument("--sample", default=str(DEFAULT_SAMPLE), metavar="K",
                        help=f"how many cells to recompute (default {DEFAULT_SAMPLE}; 'all' for every cell)")
    verify.add_argument("--seed", default="0", help="seed of the random sample (default 0)")
    add_allow_long_option(verify, "verify")
    verify.add_argument("--results-dir", type=path_arg, default=None,
                        help="log the recomputed runs here (forced: earlier runs of these cells are superseded); "
                             "default a temporary folder, deleted afterwards")
    verify.add_argument("--cache-dir", type=path_arg, default=None,
                        help="releases and trained models (default: in the results directory)")
    verify.add_argument("--data-root", type=path_arg, default=None,
                        help="root of real datasets (default $BENCH_DATA)")
    verify.add_argument("--device", default=None, choices=("cpu", "cuda"),
                        help="where to compute (default: each cell's own kind of device where present, else cpu)")
    verify.set_defaults(func=verify_cmd)


def _add_source_args(p: argparse.ArgumentParser) -> None:
    add_entries_option(p, "folder of entry JSON files, read alone (default: ./leaderboard/entries of the current "
                          "folder, or $BENCH_ENTRIES, with the baselines the package ships beside it)")
    p.add_argument("--no-entries", action="store_true", help="local runs only")
    p.add_argument("--profile", default=None, help="only cells of this profile")
    p.add_argument("--suite", action="append", default=None, metavar="NAME|FILE",
                   help="suites whose local cells form declared entries (repeatable; default: every suite in "
                        "bench/scale/suites/)")
    p.add_argument("--data-root", type=Path, default=None,
                   help="root of real datasets, to expand suites on real data (default $BENCH_DATA)")
    add_location_args(p)


def entry_folders(args: argparse.Namespace):
    """Returns the entry folders of the options (:func:`leaderboard.locations.entry_folders`).

    --entries, else $BENCH_ENTRIES, names a folder read (and written) alone; else it is
    ./leaderboard/entries of the current folder, with the package's shipped baselines beside it.
    """
    from leaderboard.locations import entry_folders as folders

    if getattr(args, "entries", None) is not None:
        return folders(args.entries, "--entries")
    if os.environ.get("BENCH_ENTRIES"):
        return folders(Path(os.environ["BENCH_ENTRIES"]), "$BENCH_ENTRIES")
    return folders(None)


def entries_dir(args: argparse.Namespace) -> Path:
    """Returns the user's entries folder: --entries, else $BENCH_ENTRIES, else ./leaderboard/entries."""
    return entry_folders(args).folder


def check_entries_folder(args: argparse.Namespace) -> None:
    """Checks that the entries folder --entries or $BENCH_ENTRIES names is a folder (the default may be missing).

    Raises:
        BenchError: The named folder does not exist or is a file, or --entries comes with --no-entries.
    """
    if getattr(args, "no_entries", False):
        if getattr(args, "entries", None) is not None:
            raise BenchError(f"--entries {args.entries} and --no-entries contradict each other; give one")
        return
    folders = entry_folders(args)
    if folders.named_by and not folders.folder.is_dir():
        state = "is a file, not a folder" if folders.folder.exists() else "does not exist"
        raise BenchError(f"{folders.named_by} {folders.folder} {state}: name the folder of entry JSON files, or pass "
                         "--no-entries")


def collect(args: argparse.Namespace):
    """Returns (Leaderboard, result rows, tracker or None) from the runs, entries and suites the options name.

    Notes about left-out results (superseded runs, results of an old schema, runs it could
    not verify, named) are printed on stderr, one line each.

    Raises:
        BenchError: There are no results at all (the line says which runs were left out and
            why, when some were), the entries folder named is none, or an
            entry or a named suite is malformed.
        StoreDamaged: The tracking store is damaged (emptied, truncated, its artifacts gone).
        StoreLocked: The tracking store stayed locked by another connection.
    """
    import pandas as pd

    from bench.storage.tracking import Tracker
    from bench.storage.tracking.health import NoResults
    from leaderboard.boards import build_leaderboard
    from leaderboard.declare import suite_declarations
    from leaderboard.locations import read_entry_folders
    from leaderboard.store import Skipped, combine, runs_frame

    check_entries_folder(args)
    check_locations(args, writing=False)
    local, problems = suite_declarations(args.suite, data_root(args.data_root))
    skipped = Skipped()
    try:
        tracker = Tracker(args.results_dir, args.tracking_uri, create=False)
    except NoResults:  # no store at all: entries alone may make a board; a damaged or locked one is an error
        tracker = None
    runs = runs_frame(tracker, skipped) if tracker is not None else pd.DataFrame()
    folders = entry_folders(args)
    entries, declarations = ((pd.DataFrame(), []) if args.no_entries
                             else read_entry_folders(folders, skipped, data_root(args.data_root),
                                                     current={key for d in local for key in d.cells}))
    frame = combine(runs, entries)
    if args.profile is not None and len(frame):
        frame = frame[frame["profile"] == args.profile].reset_index(drop=True)
    present = set(frame["task"]) if len(frame) else set()
    if len(frame) == 0:  # one line: why, when runs were left out (their tags gone, a result changed...)
        where = f"{args.results_dir}" + ("" if args.no_entries else
                                          f" or {' or '.join(map(str, folders.reading())) or folders.folder}")
        raise BenchError(skipped.nothing_left(where + (f" with profile {args.profile}" if args.profile else "")))
    notes = skipped.notes() + [p.note() for p in problems if not p.benchmarks or present & set(p.benchmarks)]
    for note in notes:
        print(f"[bench] warning: {note}", file=sys.stderr)
    return build_leaderboard(frame, [*local, *declarations]), frame, tracker


def site_folder(args: argparse.Namespace) -> Path:
    """Returns --out, else RESULTS_DIR/leaderboard."""
    return args.out or args.results_dir / "leaderboard"


def build_site_from(args: argparse.Namespace) -> Path:
    """Builds the site into --out and returns the path of index.html.

    Raises:
        BenchError: --out cannot be a folder, or :func:`collect` refuses the sources.
    """
    import tempfile
    import warnings

    from bench.storage.folders import check_writable_folder
    from leaderboard.locations import folder_sheets
    from leaderboard.render import build_site
    from leaderboard.store import sample_sheets

    out = site_folder(args)
    check_writable_folder("--out", out)
    board, frame, tracker = collect(args)
    submitted, notes = ({}, []) if args.no_entries else folder_sheets(entry_folders(args))
    for note in notes:
        print(f"[bench] warning: {note}", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # A mechanism with local runs shows its newest run's sheet; a submitted one the sheet its entry carries.
        sheets = {**submitted, **(sample_sheets(tracker, frame, tmp) if tracker is not None else {})}
        index = build_site(board, out, sheets)
    return index


def build_cmd(args: argparse.Namespace) -> int:
    """Writes the site and says where."""
    index = build_site_from(args)
    out = index.parent
    print(f"leaderboard: {index}\n  markdown: {out / 'leaderboard.md'}\n  csv: {out / 'leaderboard.csv'}\n"
          f"  exploration: {out / 'exploration.html'}")
    return 0


def serve_cmd(args: argparse.Namespace) -> int:
    """Serves the site on 127.0.0.1 until interrupted; takes the port before it builds a missing site.

    Raises:
        BenchError: The port is out of range or taken, or the site cannot be built.
    """
    from bench.cli.common import check_port
    from bench.storage.folders import check_path_name

    check_port(args.port, lowest=0)
    args.out = out = site_folder(args)
    check_locations(args, writing=False)
    check_path_name("--out", out)
    build = args.rebuild or not (out / "index.html").is_file()
    server = listen(args.port, out)
    try:
        if build:
            build_site_from(args)
        print(f"serving {out} at http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C stops)", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            print("stopped", file=sys.stderr)
    finally:
        server.server_close()
    return 0


def listen(port: int, folder: Path):
    """Returns an HTTP server bound to 127.0.0.1:port that serves a folder's files (not yet serving).

    Raises:
        BenchError: The port is taken or reserved.
    """
    import functools
    import http.server

    from bench.cli.common import cannot_listen

    class Quiet(http.server.SimpleHTTPRequestHandler):
        timeout = 10  # a client that stops reading cannot hold the server open

        def log_message(self, format, *values):
            pass

    class Server(http.server.ThreadingHTTPServer):
        # Ctrl-C waits for the requests in flight: no handler thread is left running while
        # the interpreter shuts down.
        daemon_threads = False

    try:
        return Server(("127.0.0.1", port), functools.partial(Quiet, directory=str(folder)))
    except OSError as exc:
        raise cannot_listen(port, exc) from None


def show_cmd(args: argparse.Namespace) -> int:
    """Prints the boards (or, with --exploration, the cells that are never ranked)."""
    import dataclasses

    from leaderboard.exports import render_exploration, render_markdown, render_terminal, write_csv
    from leaderboard.table import exploration_table, leaderboard_table

    if args.exploration and args.format == "markdown":
        raise BenchError("--exploration prints text or csv (the Markdown export holds the boards)")
    board, _, _ = collect(args)
    if args.benchmark is not None:
        known = sorted({b.key.benchmark for b in board.boards} | set(board.exploration["benchmark"]))
        if args.benchmark not in known:
            raise BenchError(f"no results for benchmark {args.benchmark!r} (benchmarks with results: "
                             f"{', '.join(known) or 'none'})")
        board = dataclasses.replace(
            board, boards=[b for b in board.boards if b.key.benchmark == args.benchmark],
            exploration=board.exploration[board.exploration["benchmark"] == args.benchmark])
    if args.exploration:
        if args.format == "csv":
            write_csv(exploration_table(board), sys.stdout)
        else:
            print(render_exploration(board), end="")
        return 0
    if args.format == "markdown":
        print(render_markdown(board), end="")
    elif args.format == "csv":
        write_csv(leaderboard_table(board), sys.stdout)
    else:
        print(render_terminal(board), end="")
    return 0


def verify_cmd(args: argparse.Namespace) -> int:
    """Checks an entry, recomputes a sample of its cells and prints per cell match or mismatch.

    Returns:
        0 when the entry is verified and every sampled cell matches, else 1.

    Raises:
        BenchError: The entry file is not an entry, or an option is invalid (before any work).
    """
    from bench.testing.isolated import finish, raise_breach, refuse_on_breach
    from leaderboard.entry_code import load_entry_code
    from leaderboard.store import load_entry

    path = find_entry(args, args.entry)
    entry = load_entry(path)
    with refuse_on_breach():  # a carried mechanism runs isolated: a refusal by its sandbox is the one error
        load_entry_code(entry, isolated=True)  # a one-file mechanism it carries; else check_entry says it is not registered
        raise_breach()
        return _verify(args, path, entry, finish)


def _verify(args: argparse.Namespace, path: Path, entry: dict, finish_isolated) -> int:
    from bench.storage.folders import check_writable_folder
    from bench.system.devices import resolve_device
    from leaderboard.exports import terminal_safe
    from leaderboard.reproduce import reproduce, sample_cells
    from leaderboard.verification import check_entry

    count = len(entry["cells"]) if args.sample == "all" else _count("--sample", args.sample, 1)
    seed = _count("--seed", args.seed, 0)
    if args.device is not None:
        resolve_device(args.device)
    for flag, folder in (("--results-dir", args.results_dir), ("--cache-dir", args.cache_dir)):
        if folder is not None:
            check_writable_folder(flag, folder)
    cells = sample_cells(entry["cells"], count, seed)
    check_verify_time(cells, args)
    check = check_entry(entry)
    print(terminal_safe(f"entry {entry['name']}: {check.status}"))
    if count > len(entry["cells"]):
        print(f"recomputing all {len(cells)} of {len(entry['cells'])} cells: --sample {args.sample} is more than the "
              "entry has", flush=True)
    else:
        print(f"recomputing {len(cells)} of {len(entry['cells'])} cells (sample seed {seed})", flush=True)
    print(verify_estimate(cells), flush=True)
    started = time.monotonic()
    results = reproduce(entry, cells, args.results_dir, args.cache_dir, data_root(args.data_root), args.device,
                        say=lambda line: print(line, file=sys.stderr, flush=True))
    isolation = _isolation(str(entry.get("mechanism", "")))
    finish_isolated()  # what the mechanism's worker did refuses it before anything is recorded
    for result in results:
        print("\n".join(terminal_safe(line) for line in result.lines()))
    matched = sum(r.status == "match" for r in results)
    _record(path, entry, results, seed, time.monotonic() - started, isolation)
    print(f"{matched} of {len(results)} sampled cells match" + ("" if check.verified else "; the entry is unverified"))
    return 0 if check.verified and matched == len(results) else 1


def check_verify_time(cells: list, args: argparse.Namespace) -> None:
    """Refuses a --sample whose cells took longer than the time bound where they were computed, unless --allow-long.

    Raises:
        BenchError: One line naming --sample, its cells' recorded time and --allow-long.
    """
    from bench.cell.estimate import Estimate, check_bound

    seconds = [float(c.get("runtime_s") or 0.0) for c in cells]
    if cells and all(seconds) and args.sample != str(DEFAULT_SAMPLE):
        check_bound(Estimate(sum(seconds), given=(f"--sample {args.sample}",), given_factor=float(len(cells)),
                             source="the run times the entry records for them"), args.allow_long,
                    f"recomputing {len(cells)} cells")


def verify_estimate(cells: list) -> str:
    """Says how long recomputing ``cells`` took where they were computed (their recorded run times)."""
    from leaderboard.cells import hardware_label

    seconds = [float(c.get("runtime_s") or 0.0) for c in cells]
    if not cells or not all(seconds):
        return "estimate: unknown (the entry records no run time for some sampled cells)"
    machines = "; ".join(sorted({hardware_label(c) for c in cells}))
    return (f"estimate: about {sum(seconds) / 60:.1f} min of cell time, as the cells took on {machines} "
            "(another machine may differ)")


def _isolation(name: str) -> str:
    """How the entry's mechanism ran: ``bwrap`` or ``process`` (its carried file, isolated), else ``none``."""
    from bench.core.registry import mechanisms

    worker = getattr(mechanisms.get(name), "isolated_worker", None) if name in mechanisms else None
    return worker.mode if worker is not None else "none"


def _record(path: Path, entry: dict, results: list, seed: int, seconds: float, isolation: str = "none") -> None:
    """Writes the reproduction record beside the entry file (``code.isolation``: how its mechanism ran)."""
    import torch

    from bench.cell.provenance import cpu_model, git_sha, versions
    from leaderboard.reproduced import write_record

    facts = {"label": "; ".join(sorted({r.hardware for r in results if r.hardware})) or "nothing recomputed",
             "cpu": cpu_model(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
             "torch": versions()["torch"]}
    try:
        record = write_record(path, entry, results, sample_seed=seed, hardware=facts,
                              code={"git_sha": git_sha(), "privbench": versions()["privbench"], "isolation": isolation},
                              seconds=seconds)
    except OSError as exc:
        print(f"[bench] warning: no reproduction record written beside {path}: {exc.strerror or exc}", file=sys.stderr)
        return
    print(f"recorded: {record} (commit it beside the entry: the board ranks an entry file once it is reproduced)")


def find_entry(args: argparse.Namespace, path: Path) -> Path:
    """Returns the entry file ENTRY names: a file, else the entry of that name (or file stem) in the entries folders.

    The user's folder is searched before the shipped baselines.

    Raises:
        BenchError: ENTRY is neither a file nor the name of an entry in those folders, or
            --entries names no folder.
    """
    from bench.storage.folders import check_path_name
    from leaderboard.locations import entry_names_in

    check_path_name("ENTRY", path)
    if args.entries is not None:  # a folder that is not there would be passed over without a word
        check_path_name("--entries", args.entries)
        if not args.entries.is_dir():
            state = "is a file, not a folder" if args.entries.exists() else "does not exist"
            raise BenchError(f"--entries {args.entries} {state}: name the folder of entry JSON files")
    if path.exists():
        return path
    text = str(path)
    folders = entry_folders(args)
    for folder in [folders.folder, *([folders.shipped] if folders.shipped is not None else [])]:
        if not folder.is_dir():
            continue
        names = entry_names_in(folder)
        if text in names:
            return folder / names[text]
        if (folder / f"{text}.json").is_file():
            return folder / f"{text}.json"
    searched = folders.label + (" or the shipped baselines" if folders.shipped is not None else "")
    raise BenchError(f"ENTRY {text}: no such file, and no entry of that name in {searched}")


def _count(flag: str, text: str, low: int) -> int:
    """Parses a whole number >= ``low`` given to ``flag``.

    Raises:
        BenchError: Not a whole number, or below ``low``.
    """
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if value < low:
        raise BenchError(f"{flag} must be a whole number >= {low}" + (" or 'all'" if flag == "--sample" else "")
                         + f", got {text!r}")
    return value
