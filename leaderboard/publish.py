"""The published board: the shipped entries (leaderboard/entries/), rendered with nothing computed.

``mkdocs build`` calls :func:`publish` (docs/hooks/leaderboard.py), so the documentation
site and the board are one static folder a host serves as it is: the docs at its root and
the board under ``board/``, linking each other. ``bench leaderboard build`` renders the same
entries together with the local runs; this renders the entries alone, so what is published
is exactly what the repository holds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from leaderboard.store import ENTRIES_DIR

__all__ = ["BOARD_FOLDER", "publish"]

BOARD_FOLDER = "board"
"""Where the board sits in the documentation site."""


def publish(out: str | Path, entries: str | Path = ENTRIES_DIR, docs: str | None = "../",
            say: Callable[[str], None] = print) -> Path:
    """Renders the entries of a folder as the static board; returns the path of its index.html.

    Args:
        out: The board's folder (created; existing files are overwritten).
        entries: The entries folder (by default the shipped leaderboard/entries/).
        docs: The documentation root relative to ``out`` (None: a board on its own).
        say: Where each note goes (a stale entry, a sheet that does not match its digest).

    Raises:
        BenchError: A malformed entry, or ``out`` cannot be a folder.
    """
    from leaderboard.boards import build_leaderboard
    from leaderboard.render import build_site
    from leaderboard.sheets import entry_sheets
    from leaderboard.store import Skipped, read_entries

    skipped = Skipped()
    frame, declarations = read_entries(entries, skipped)
    sheets, notes = entry_sheets(entries)
    for note in skipped.notes() + notes:
        say(f"[bench] warning: {note}")
    return build_site(build_leaderboard(frame, declarations), out, sheets, docs=docs)
