"""MkDocs hook: the CLI reference page, rendered from ``bench.cli.build_parser()`` at build time.

The page ``cli.md`` holds the marker ``<!-- cli-reference -->``; this hook replaces it with
one section per subcommand (and per action of a subcommand that has actions), each holding
that parser's ``format_help()``. Nothing is copied by hand, so the page is always the help
that the installed ``bench`` prints.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator

MARKER = "<!-- cli-reference -->"
WIDTH = "100"


def _subparsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Yields ``(name, parser)`` for each subcommand of ``parser``, in the order they were added."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            seen: set[int] = set()
            for name, sub in action.choices.items():
                if id(sub) not in seen:
                    seen.add(id(sub))
                    yield name, sub


def _sections(parser: argparse.ArgumentParser, prefix: str, depth: int) -> Iterator[str]:
    """Yields a Markdown section per subcommand of ``parser``, recursing into nested actions."""
    for name, sub in _subparsers(parser):
        command = f"{prefix} {name}"
        yield f"{'#' * depth} `{command}`\n\n```text\n{sub.format_help().rstrip()}\n```\n"
        yield from _sections(sub, command, depth + 1)


def render() -> str:
    """Returns the Markdown of the whole reference: ``bench --help`` and every subcommand's help.

    Returns:
        The text that replaces the page's marker, rendered at a fixed width of 100 columns so
        that the page does not depend on the terminal that builds it.
    """
    from bench.cli import build_parser

    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        parser = build_parser()
        top = f"### `bench`\n\n```text\n{parser.format_help().rstrip()}\n```\n"
        return "\n".join([top, *_sections(parser, "bench", 3)])
    finally:
        if previous is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = previous


def on_page_markdown(markdown: str, page, config, files) -> str:
    """Replaces the marker on the CLI page with the rendered reference; other pages pass through."""
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, render())
