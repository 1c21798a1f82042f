"""The ``bench`` command line.

Each subcommand lives in its own module with an ``add_parser(subparsers)`` function that
sets ``func`` on its parser. Errors a user can cause print one line and exit with 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Sequence

from bench.errors import BenchError

SUBCOMMANDS = (
    "list_cmd", "run_cmd", "show_cmd", "runs_cmd", "mechanisms_cmd", "grid_cmd", "tune_cmd", "leaderboard_cmd",
    "submit_cmd",
    "audit_cmd", "release_cmd", "cache_cmd", "report_cmd",
    "relocate_cmd", "ui_cmd",
)


_GIVEN = "_bench_options_given"
"""The namespace attribute that holds, while parsing, the options already given (removed after)."""


class _StoreOnce(argparse._StoreAction):
    """argparse's ``store`` for an option that takes one value: giving it twice is an error.

    Plain argparse keeps the last value, so ``--profile smoke --profile paper`` would run
    ``paper`` without a word; repeatable options say so with ``action="append"``.
    """

    def __call__(self, parser, namespace, values, option_string=None):  # type: ignore[no-untyped-def]
        if self.option_strings:
            given = namespace.__dict__.setdefault(_GIVEN, {})
            shown = f"{option_string} {values}" if str(values).isprintable() else f"{option_string} {values!r}"
            if self.dest in given:
                raise argparse.ArgumentError(
                    self, f"given twice ({given[self.dest]} and {shown}); it takes one value, give it once")
            given[self.dest] = shown
        super().__call__(parser, namespace, values, option_string)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr and exit 2.

    Subparsers (``add_subparsers``) inherit the class, so every subcommand and every
    ``choices`` option suggests the closest valid value of a mistyped one, and every
    option that takes one value (argparse's default ``store``) refuses to be given twice.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.register("action", None, _StoreOnce)
        self.register("action", "store", _StoreOnce)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:  # type: ignore[override]
        """Parses as argparse does, then drops the record of which options were given."""
        parsed, extras = super().parse_known_args(args, namespace)
        parsed.__dict__.pop(_GIVEN, None)
        return parsed, extras

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        """Adds "did you mean" to argparse's "invalid choice" message (subcommands and ``choices``)."""
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as exc:
            from bench.core.config import did_you_mean

            raise argparse.ArgumentError(action, exc.message + did_you_mean(value, action.choices or ())) from None


def build_parser() -> argparse.ArgumentParser:
    """Returns the parser with every subcommand attached."""
    import importlib

    from bench.core.version import __version__

    parser = _Parser(prog="bench", description="PrivBench: privacy-utility benchmarks for image privacy mechanisms")
    parser.add_argument("--version", action="version", version=f"privbench {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    subparsers.required = True
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(f"bench.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"bench.cli.{name}":
                raise
            continue
        module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the CLI; returns the exit status (0 ok, 2 user error, 130 interrupted)."""
    from bench.storage import derived
    from bench.system.memory import tune_allocator

    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    tune_allocator()  # before torch is imported: huge pages for large CPU tensors (bench/system/memory.py)
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with derived.enabled():  # answers worked out from the code alone are kept and read (bench/storage/derived.py)
            return int(args.func(args) or 0)
    except BenchError as exc:
        message = " ".join(str(exc).split())
        print(f"bench: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("bench: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
