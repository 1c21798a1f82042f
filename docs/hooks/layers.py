"""MkDocs hook: the layer pages list every module of a package, found in its folder at build time.

A page holds ``<!-- layer-modules PACKAGE -->`` (``bench.system``, ``mechanisms``, ...); this
hook replaces it with one mkdocstrings block per public module of the package and of its
sub-packages (names not starting with ``_``), each rendering the module's docstring without
its members. Modules are found from the files, so a module added to a layer appears without
editing the page, and one that no longer exists is never listed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"<!-- layer-modules (?P<package>[A-Za-z_][\w.]*) -->")
BLOCK = """::: {module}
    options:
      members: false
      show_root_heading: true
      show_root_full_path: true
      heading_level: 3
"""


def modules(root: Path, package: str) -> Iterator[str]:
    """Yields the dotted names of ``package`` and its public modules and sub-packages, sorted.

    Args:
        root: The repository root (the folder that holds the packages).
        package: A dotted package name, e.g. ``bench.system``.

    Raises:
        PluginError: ``package`` has no ``__init__.py`` under ``root`` (the build stops and names it).
    """
    folder = root.joinpath(*package.split("."))
    if not (folder / "__init__.py").is_file():
        raise PluginError(f"layer package {package} not found at {folder}")
    yield package
    for path in sorted(folder.iterdir()):
        if path.name.startswith("_"):
            continue
        if path.is_dir() and (path / "__init__.py").is_file():
            yield from modules(root, f"{package}.{path.name}")
        elif path.suffix == ".py":
            yield f"{package}.{path.stem}"


def on_page_markdown(markdown: str, page, config, files) -> str:
    """Replaces each layer marker with the mkdocstrings blocks of its package's modules."""
    return MARKER.sub(lambda m: "\n".join(BLOCK.format(module=name) for name in modules(ROOT, m["package"])),
                      markdown)
