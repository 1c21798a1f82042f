"""The layering rule of docs/architecture.md, on the import graph: imports run downward and never in a circle.

The layers are those of the ``layers`` contract in pyproject.toml (``lint-imports`` checks
the same contracts). The graph is grimp's (import-linter's), which counts every import
statement: at module level, inside functions and under ``TYPE_CHECKING``.

Run ``python tests/unit/test_layering.py`` to print the counts.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
PACKAGES = tuple(CONFIG["root_packages"])
LAYERS: list[str] = next(c for c in CONFIG["contracts"] if c["type"] == "layers")["layers"]
DOORS = {"__init__.py", "__main__.py", "interfaces.py", "registry.py"}
"""bench's own top-level modules: the package door, ``python -m bench`` and two public import paths."""


def _graph() -> grimp.ImportGraph:
    sys.path.insert(0, str(ROOT))
    try:
        return grimp.build_graph(*PACKAGES, include_external_packages=False, cache_dir=None)
    finally:
        sys.path.remove(str(ROOT))


def layer_of(module: str) -> int | None:
    """Returns the index of a module's layer in :data:`LAYERS` (0 is the top), or None for the doors."""
    best = None
    for index, layer in enumerate(LAYERS):
        if (module == layer or module.startswith(layer + ".")) and (best is None or len(layer) > len(LAYERS[best])):
            best = index
    return best


def upward_imports(graph: grimp.ImportGraph) -> list[tuple[str, str]]:
    """Returns every (importer, imported) pair where a lower layer imports a higher one."""
    found = []
    for importer in sorted(graph.modules):
        low = layer_of(importer)
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            high = layer_of(imported)
            if low is not None and (high is None or high < low):
                found.append((importer, imported))
    return found


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Returns the import cycles between modules (strongly connected sets of more than one, Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return _graph()


def test_no_layer_imports_a_layer_above_it(graph):
    assert upward_imports(graph) == []


def test_no_modules_import_each_other_in_a_circle(graph):
    assert cycles(graph) == []


def test_every_package_of_bench_has_a_layer_and_only_the_doors_sit_beside_them():
    packages = sorted(p.name for p in (ROOT / "bench").iterdir() if (p / "__init__.py").is_file())
    assert [p for p in packages if f"bench.{p}" not in LAYERS] == []
    modules = sorted(p.name for p in (ROOT / "bench").glob("*.py"))
    assert [m for m in modules if m not in DOORS and f"bench.{m[:-3]}" not in LAYERS] == []


def test_import_linter_keeps_every_contract():
    linter = Path(sys.executable).with_name("lint-imports")
    if not linter.exists():
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    run = subprocess.run([str(linter), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]


if __name__ == "__main__":
    built = _graph()
    found_cycles, found_upward = cycles(built), upward_imports(built)
    print(f"{len(built.modules)} modules, {sum(len(built.find_modules_directly_imported_by(m)) for m in built.modules)} "
          f"imports; cycles: {len(found_cycles)}; upward imports: {len(found_upward)}")
    for cycle in found_cycles:
        print("cycle:", " -> ".join(cycle))
    for importer, imported in found_upward:
        print(f"upward: {importer} -> {imported}")
