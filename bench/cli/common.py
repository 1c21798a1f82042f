"""Options shared by subcommands and the progress reporter.

The options that define cells (mechanism, task, parameters, seed(s), profile, device,
precision, data root, attacks, ``--set``, mechanism files, locations) are declared once, in
:func:`add_cell_options`, for ``bench run`` and ``bench tune`` (one cell: ``--seed``,
``K=V``) and for ``bench grid`` and ``bench submit`` (many: comma lists, ``--seeds``,
``K=V1,V2``, profile from the suite); :func:`run_config` reads one cell's options.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.core.params import parse_assignments
from bench.errors import BenchError

if TYPE_CHECKING:
    from bench.cell.plan import RunConfig


def add_cell_options(parser: argparse.ArgumentParser, many: bool = False) -> None:
    """Adds the options that define cells, with the locations (--results-dir, --cache-dir, --tracking-uri).

    Args:
        parser: The subcommand's parser.
        many: Options of a grid: ``--task``/``--mechanism`` take comma lists (optional,
            a suite may give them), ``--param K=V1,V2`` lists values to cross,
            ``--seeds 0,1`` replaces ``--seed N``, and ``--profile`` defaults to the suite's.
    """
    only = "; with --suite: only these of the suite's" if many else ""
    parser.add_argument("--mechanism", required=not many,
                        help=f"{'comma-separated mechanisms' if many else 'registered mechanism name'} "
                             f"(bench list mechanisms){only}")
    parser.add_argument("--task", required=not many,
                        help=f"{'comma-separated benchmarks' if many else 'benchmark name'}, e.g. fewshot_synth_faces "
                             f"(bench list benchmarks){only}")
    if many:
        parser.add_argument("--param", action="append", metavar="K=V1,V2", help="parameter values to cross (repeatable)")
        parser.add_argument("--seeds", default=None, help="comma-separated seeds (default: the suite's, else 0)")
    else:
        parser.add_argument("--param", action="append", metavar="K=V", help="mechanism parameter (repeatable)")
        parser.add_argument("--seed", type=int, default=0, help="base seed, in [0, 2^63) (default 0)")
    parser.add_argument("--profile", default=None if many else "quick",
                        help="smoke | quick | paper (default: " + ("the suite's, else quick)" if many else "quick)"))
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (default auto)")
    parser.add_argument("--precision", default="fp32",
                        help="fp32, or bf16: bfloat16 mixed precision for the task's networks (adversaries stay "
                             "fp32; faster on CPUs with AMX; other numbers, cells and boards; default fp32)")
    parser.add_argument("--data-root", type=path_arg, default=None, help="root of real datasets (default $BENCH_DATA)")
    parser.add_argument("--attacks", default=None,
                        help="comma-separated adversaries, or 'none' (default: " + ("the suite's or " if many else "")
                             + "the benchmark's)")
    add_set_option(parser, "override a task or attack setting, e.g. task.epochs=3, task.data.min_images=10 or "
                           "face_reid.weights=PATH" + (" (in every cell, added to the suite's)" if many else ""))
    parser.add_argument("--mechanism-file", type=path_arg, action="append", default=[],
                        help="a Python file that registers a mechanism (repeatable"
                             + ("; loaded in every worker)" if many else ")"))
    add_allow_long_option(parser, "cell")
    add_location_args(parser)


def add_allow_long_option(parser: argparse.ArgumentParser, what: str) -> None:
    """Adds ``--allow-long`` (``args.allow_long``): run settings estimated beyond the time bound.

    Args:
        parser: The subcommand's parser.
        what: What the estimate is of, for the help (``cell``, ``audit``).
    """
    from bench.cell.estimate import ALLOW_LONG, BOUND_S, about

    parser.add_argument(ALLOW_LONG, action="store_true",
                        help=f"run even when the settings you gave make a {what} take longer than {about(BOUND_S)} by "
                             "the plan's estimate (otherwise refused before any work)")


def load_plugins(args: argparse.Namespace) -> None:
    """Imports the --mechanism-file files.

    Raises:
        BenchError: A file is missing, fails to import or registers no mechanism.
    """
    from bench.core.registry import load_mechanism_file

    for path in args.mechanism_file:
        load_mechanism_file(path)


def run_config(args: argparse.Namespace, absolute: bool = False, **extra: Any) -> "RunConfig":
    """Returns the RunConfig of one cell's options (see :func:`add_cell_options`).

    Args:
        args: Parsed options of ``bench run`` or ``bench tune``.
        absolute: Resolve the results and cache directories and make the tracking URI
            explicit (what workers elsewhere need); otherwise they are kept as given.
        **extra: Other RunConfig fields (``verify_data``).

    Raises:
        BenchError: A malformed --param, --set or --attacks, or a location that
            :func:`check_locations` refuses.
    """
    from bench.cell.plan import RunConfig

    check_locations(args)
    results, cache, uri = args.results_dir, cache_dir(args), args.tracking_uri
    if absolute:
        from bench.storage.tracking import tracking_uri

        results, cache = results.resolve(), cache.resolve()
        uri = tracking_uri(results, uri)
    return RunConfig(
        task=args.task, mechanism=args.mechanism, params=parse_assignments(args.param), seed=args.seed,
        profile=args.profile, device=args.device, data_root=data_root(args.data_root), results_dir=results,
        cache_dir=cache, attacks=parse_attacks(args.attacks), overrides=parse_overrides(args.overrides),
        tracking_uri=uri, precision=args.precision, allow_long=getattr(args, "allow_long", False), **extra,
    )


def add_set_option(parser: argparse.ArgumentParser, help_text: str) -> None:
    """Adds ``--set SECTION.K=V`` (repeatable, into ``args.overrides``; read with :func:`parse_overrides`)."""
    parser.add_argument("--set", action="append", metavar="SECTION.K=V", dest="overrides", help=help_text)


def add_location_args(parser: argparse.ArgumentParser) -> None:
    """Adds --results-dir, --cache-dir and --tracking-uri."""
    parser.add_argument("--results-dir", type=path_arg, default=Path(os.environ.get("BENCH_RESULTS") or "results"),
                        help="MLflow database and artifacts (default: ./results or $BENCH_RESULTS)")
    parser.add_argument("--cache-dir", type=path_arg, default=None,
                        help="releases and trained models (default: RESULTS_DIR/cache or $BENCH_CACHE)")
    parser.add_argument("--tracking-uri", type=text_arg, default=None,
                        help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI or sqlite in RESULTS_DIR)")


def add_entries_option(parser: argparse.ArgumentParser, help_text: str) -> None:
    """Adds ``--entries DIR``, the folder of entry JSON files (``args.entries``, None when not given).

    Where a command looks when it is not given (``./leaderboard/entries`` with the shipped
    baselines, :mod:`leaderboard.locations`) is the command's to say, in ``help_text``.
    """
    parser.add_argument("--entries", type=path_arg, default=None, metavar="DIR", help=help_text)


def path_arg(text: str) -> Path:
    """An argparse ``type`` for paths: refuses an empty one (``Path("")`` would be the current folder).

    Raises:
        argparse.ArgumentTypeError: The text is empty or blank.
    """
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path; give a path ('.' for the current folder)")
    return Path(text)


def text_arg(text: str) -> str:
    """An argparse ``type`` for names and URIs: refuses an empty or blank one (it would mean "the default").

    Raises:
        argparse.ArgumentTypeError: The text is empty or blank, or holds a line break or another
            control character.
    """
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty value; leave the option out for its default")
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise argparse.ArgumentTypeError(f"a name or URI is one line of printable text, got {text!r}")
    return text


def check_locations(args: argparse.Namespace, writing: bool = True) -> None:
    """Checks --results-dir, --cache-dir, --data-root and --tracking-uri before any work; creates nothing.

    Args:
        args: Options declared by :func:`add_location_args` (and ``--data-root`` where there is one).
        writing: The command writes into the results and cache folders (they must be
            writable or creatable); otherwise only their names are checked.

    Raises:
        BenchError: A name over 255 bytes, a folder that cannot be written, or a tracking
            URI that :func:`bench.storage.tracking.check_tracking_uri` refuses (in memory, missing folder).
    """
    from bench.storage.folders import check_path_name, check_writable_folder
    from bench.storage.tracking import tracking_uri

    check = check_writable_folder if writing else check_path_name
    check("--results-dir", args.results_dir)
    check("--cache-dir", cache_dir(args))
    if getattr(args, "data_root", None) is not None:
        check_path_name("--data-root", args.data_root)
    tracking_uri(args.results_dir, args.tracking_uri)


def cache_dir(args: argparse.Namespace) -> Path:
    """Returns the cache directory from --cache-dir, $BENCH_CACHE or the results dir."""
    if getattr(args, "cache_dir", None) is not None:  # bench.api.cells builds namespaces without it
        return args.cache_dir
    if os.environ.get("BENCH_CACHE"):
        return Path(os.environ["BENCH_CACHE"])
    return args.results_dir / "cache"


def data_root(value: Path | None) -> Path | None:
    """Returns --data-root, else $BENCH_DATA, else None."""
    if value is not None:
        return value
    env = os.environ.get("BENCH_DATA")
    return Path(env) if env else None


def parse_overrides(items: list[str] | None) -> dict[str, dict[str, str]]:
    """Parses ``--set SECTION.NAME=VALUE`` items into section -> name -> value.

    Raises:
        BenchError: An item without a section.
    """
    out: dict[str, dict[str, str]] = {}
    for key, value in parse_assignments(items).items():
        section, dot, name = key.partition(".")
        if not dot or not name:
            raise BenchError(f"--set expects SECTION.NAME=VALUE (e.g. task.epochs=3), got {key!r}")
        out.setdefault(section, {})[name] = value
    return out


def parse_attacks(text: str | None) -> tuple[str, ...] | None:
    """Parses ``--attacks``: None (the task's own), ``none`` (no adversary) or names.

    Raises:
        BenchError: The option names no adversary (an empty list is not ``none``).
    """
    if text is None:
        return None
    names = [a.strip() for a in text.split(",") if a.strip()]
    if not names:
        raise BenchError("--attacks needs adversary names (comma-separated) or 'none'")
    if names == ["none"]:
        return ()
    if "none" in names:
        raise BenchError(f"--attacks: 'none' cannot be combined with adversaries, got {text!r}")
    return tuple(names)


PORTS = 65535
"""The highest TCP port."""


def check_port(port: int, lowest: int = 1) -> None:
    """Checks a --port value: in ``lowest``..65535 (0, where allowed, lets the system pick a free port).

    Raises:
        BenchError: The port is out of range.
    """
    if not lowest <= port <= PORTS:
        picks = " (0 picks a free port)" if lowest == 0 else ""
        raise BenchError(f"--port must be in {lowest}..{PORTS}{picks}, got {port}")


def cannot_listen(port: int, exc: OSError) -> BenchError:
    """Returns the error for a port on 127.0.0.1 that cannot be listened on (in use, or reserved)."""
    return BenchError(f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc} (pass another --port)")
