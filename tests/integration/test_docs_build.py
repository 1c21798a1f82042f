"""The documentation site builds with ``mkdocs build --strict``: no broken link, no docstring that does not render;
the shipped leaderboard is published inside it (board/).

The build also runs the site's hooks: the CLI reference is rendered from ``bench.cli.build_parser()``
(docs/hooks/cli_reference.py), so every subcommand's help must be on that page, and the layer
pages list every module of their package (docs/hooks/layers.py).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NEEDED = ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python")


def _missing() -> list[str]:
    missing = []
    for name in NEEDED:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            missing.append(name)
    return missing


pytestmark = pytest.mark.skipif(
    bool(_missing()),
    reason=f"the docs toolchain is not installed ({', '.join(_missing())}): "
           "pip install -c constraints.txt -e '.[docs]' (the test extra has it)",
)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site built once for this module, strictly (any warning fails the build)."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
                           "-f", str(ROOT / "mkdocs.yml"), "-d", str(out)],
                          check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    return out


def _commands(parser: argparse.ArgumentParser, prefix: str = "bench"):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{prefix} {name}", sub
                yield from _commands(sub, f"{prefix} {name}")


def test_site_builds_strictly(site):
    assert (site / "index.html").is_file()
    assert (site / "api" / "api" / "index.html").is_file()


def test_cli_reference_holds_every_subcommands_help(site):
    from bench.cli import build_parser

    page = (site / "cli" / "index.html").read_text(encoding="utf-8")
    commands = list(_commands(build_parser()))
    assert len(commands) >= 15
    for command, _ in commands:
        assert f"usage: {command} " in page, f"{command} is missing from the CLI reference"


def test_api_reference_renders_the_users_door(site):
    page = (site / "api" / "api" / "index.html").read_text(encoding="utf-8")
    for name in ("run", "results", "runs", "grid", "tune", "group_results", "leaderboard",
                 "list_mechanisms", "load_mechanism"):
        assert f'id="bench.api.{name}"' in page, f"bench.api.{name} is not rendered"


def test_the_site_publishes_the_shipped_board_linked_with_the_docs(site):
    """docs/hooks/leaderboard.py renders leaderboard/entries/ into board/ (issue 40): one folder a host serves."""
    import re

    index = (site / "board" / "index.html").read_text(encoding="utf-8")
    assert 'href="../protocol/index.html">docs/protocol.md</a>' in index
    assert (site / "protocol" / "index.html").is_file()
    assert 'href="../index.html">Documentation</a>' in index
    for href in re.findall(r'href="(boards/[^"]+\.html)"', index):
        assert (site / "board" / href).is_file(), href
    assert 'href="../board/index.html"' in (site / "baselines" / "index.html").read_text(encoding="utf-8")
