"""Options shared by subcommands and the progress reporter."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterable

from bench.errors import BenchError
from bench.params import parse_assignments


def add_location_args(parser: argparse.ArgumentParser) -> None:
    """Adds --results-dir, --cache-dir and --tracking-uri."""
    parser.add_argument("--results-dir", type=Path, default=Path(os.environ.get("BENCH_RESULTS", "results")),
                        help="MLflow database and artifacts (default: ./results or $BENCH_RESULTS)")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="releases and trained models (default: RESULTS_DIR/cache or $BENCH_CACHE)")
    parser.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI or sqlite in RESULTS_DIR)")


def cache_dir(args: argparse.Namespace) -> Path:
    """Returns the cache directory from --cache-dir, $BENCH_CACHE or the results dir."""
    if args.cache_dir is not None:
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


def interactive() -> bool:
    """Whether to draw progress: stderr is a terminal and not in CI."""
    return sys.stderr.isatty() and not os.environ.get("CI")


def reporter(verbose: bool) -> tuple[Callable[[str], None], Callable[..., Any]]:
    """Returns (log, progress) functions: lines on stderr and tqdm bars on a terminal."""
    def log(message: str) -> None:
        if verbose:
            print(f"[bench] {message}", file=sys.stderr, flush=True)

    def progress(iterable: Iterable, total: int | None = None, desc: str | None = None) -> Iterable:
        if not interactive():
            return iterable
        from tqdm import tqdm

        return tqdm(iterable, total=total, desc=desc, leave=False, file=sys.stderr)

    return log, progress
