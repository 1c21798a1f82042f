"""MkDocs hook: the shipped leaderboard, rendered into the documentation site at ``board/``.

After the pages are built, :func:`leaderboard.publish.publish` renders the entries that the
repository holds (leaderboard/entries/) into ``SITE_DIR/board/``, its pages linking the
protocol's page and the documentation. Nothing is computed: a host serves the built site
folder as it is, documentation and board together.
"""

from __future__ import annotations

import logging
from pathlib import Path

from mkdocs.exceptions import PluginError

log = logging.getLogger("mkdocs.hooks.leaderboard")


def on_post_build(config) -> None:
    """Writes the board into the built site; its notes (a stale entry, a sheet that does not match) are warnings.

    Raises:
        PluginError: An entry is malformed or the board cannot be written (the build stops and says why).
    """
    from bench.errors import BenchError
    from leaderboard.publish import BOARD_FOLDER, publish

    out = Path(config["site_dir"]) / BOARD_FOLDER
    try:
        index = publish(out, say=log.warning)  # a stale entry or a bad sample sheet fails a --strict build
    except BenchError as exc:
        raise PluginError(f"the leaderboard cannot be published: {exc}") from None
    log.info("leaderboard published: %s", index)
