"""Registries of mechanisms, tasks, attacks and datasets.

A decorator is the only place a name is declared::

    @register_mechanism("dp_pix")
    class DPPix(Mechanism): ...

and a benchmark (a task kind on one dataset with its adversaries and their targets) is one
line of ``tasks/benchmarks.py`` (see :func:`bench.core.benchmarks.declare_benchmark`), which
registers it in ``benchmarks`` and its task class in ``tasks``.

Built-in modules are imported lazily on first use; third-party packages register through
the entry-point groups ``bench.mechanisms``, ``bench.tasks``, ``bench.core.benchmarks``,
``bench.attacks`` and ``bench.data`` (a broken plugin warns, it never crashes the CLI).

Finding the built-ins imports every built-in module (and torch with them). A command that
only needs to know which names exist (``bench run`` with a mistyped name, a board that asks
whether an entry's mechanism is registered) is answered without importing them when an
index of the built-in names is in use (:func:`use_index`; the ``bench`` command installs
:mod:`bench.storage.derived`'s, which is worked out by this discovery itself): while no
registry has been discovered and no plugin is installed, the names a discovery would
register are the index's and those registered so far.
"""

from __future__ import annotations

import contextlib
import difflib
import fnmatch
import functools
import importlib
import importlib.util
import pkgutil
import sys
import warnings
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Callable, Generic, Iterator, Mapping, Protocol, TypeVar

from bench.errors import BenchError

T = TypeVar("T")


class Index(Protocol):
    """The built-in names of each registry, without importing them (see :func:`use_index`)."""

    def names(self, kind: str) -> Mapping[str, Mapping[str, Any]] | None:
        """Returns name -> indexed attributes of the built-ins of one kind ("mechanism"), or None when unknown."""


_index: Index | None = None
_builtin_imports = 0
"""How many built-in packages are being imported by a discovery now: what registers meanwhile is a built-in."""


class Registry(Generic[T]):
    """A name -> object table with lazy discovery of built-ins and plugins.

    Args:
        kind: Singular noun for messages ("mechanism").
        packages: Built-in packages whose modules are imported on first use.
        group: Entry-point group that plugins register under.
    """

    def __init__(self, kind: str, packages: tuple[str, ...], group: str):
        self.kind = kind
        self.packages = packages
        self.group = group
        self._items: dict[str, T] = {}
        self._origins: dict[str, str] = {}
        self._discovered = False
        self._builtin: set[str] = set()

    def register(self, name: str) -> Callable[[T], T]:
        """Returns a decorator that registers an object under ``name``.

        Raises:
            ValueError: The name is malformed or already taken.
        """
        if not name or not all(c.isalnum() or c in "_-." for c in name):
            raise ValueError(f"invalid {self.kind} name {name!r}: use letters, digits, '_', '-', '.'")

        def decorator(obj: T) -> T:
            if name in self._items and self._items[name] is not obj:
                raise ValueError(
                    f"{self.kind} {name!r} is already registered by {self._origins[name]}; "
                    "choose another name"
                )
            self._items[name] = obj
            self._origins[name] = getattr(obj, "__module__", "?")
            if _builtin_imports:
                self._builtin.add(name)
            if isinstance(obj, type):
                obj.name = name  # type: ignore[attr-defined]
            return obj

        return decorator

    def get(self, name: str) -> T:
        """Returns the object registered under ``name``.

        Raises:
            BenchError: No such name; the message suggests the closest one.
        """
        if name not in self._items:
            indexed = self._indexed()
            if indexed is not None and name not in indexed:
                raise self._unknown(name, [*indexed, *self._items])  # what a discovery would say, without one
        self.discover()
        try:
            return self._items[name]
        except KeyError:
            raise self._unknown(name, list(self._items)) from None

    def _unknown(self, name: str, known: list[str]) -> BenchError:
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return BenchError(f"unknown {self.kind} {name!r}{hint} (see 'bench list {self.kind}s')")

    def list(self, pattern: str = "*") -> list[str]:
        """Returns the sorted names that match a shell-style wildcard pattern."""
        indexed = self._indexed()
        if indexed is None:
            self.discover()
        names = set(self._items) | set(indexed or ())
        return sorted(n for n in names if fnmatch.fnmatchcase(n, pattern))

    def __contains__(self, name: str) -> bool:
        indexed = self._indexed()
        if indexed is not None:
            return name in indexed or name in self._items
        self.discover()
        return name in self._items

    def attribute(self, name: str, attribute: str) -> Any:
        """Returns ``getattr(self.get(name), attribute)``, from the index without importing the built-in where it holds it.

        Raises:
            BenchError: No such name.
        """
        indexed = self._indexed() if name not in self._items else None
        if indexed is not None and attribute in indexed.get(name, {}):
            return indexed[name][attribute]
        return getattr(self.get(name), attribute)

    def _indexed(self) -> Mapping[str, Mapping[str, Any]] | None:
        """Returns the index's built-ins of this kind while they stand for a discovery (none yet, no plugins), else None."""
        if self._discovered or _index is None or all(self is not r for r in REGISTRIES) or plugins_installed():
            return None
        return _index.names(self.kind)

    def only_builtins(self) -> bool:
        """Whether every name registered here was registered by a discovery's import of a built-in module."""
        return set(self._items) <= self._builtin

    def untouched(self) -> bool:
        """Whether nothing is registered here yet and nothing has been discovered."""
        return not self._discovered and not self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.list())

    def origin(self, name: str) -> str:
        """Returns the module that registered ``name``."""
        self.get(name)
        return self._origins[name]

    def discover(self) -> None:
        """Imports built-in modules and plugin entry points, once."""
        if self._discovered:
            return
        self._discovered = True
        for package in self.packages:
            _import_submodules(package)
        for ep in _entry_points(self.group):
            try:
                ep.load()
            except Exception as exc:  # a broken plugin must not take the CLI down
                warnings.warn(f"could not load {self.kind} plugin {ep.name!r} ({ep.value}): {exc}", stacklevel=2)

    @contextlib.contextmanager
    def scoped(self) -> Iterator["Registry[T]"]:
        """Snapshots the table and restores it on exit (for tests)."""
        self.discover()
        items, origins = dict(self._items), dict(self._origins)
        try:
            yield self
        finally:
            self._items, self._origins = items, origins


def _import_submodules(package: str) -> None:
    global _builtin_imports
    _builtin_imports += 1
    try:
        module = importlib.import_module(package)
        for info in pkgutil.iter_modules(module.__path__):
            if not info.name.startswith("_"):
                importlib.import_module(f"{package}.{info.name}")
    finally:
        _builtin_imports -= 1


def _entry_points(group: str):
    return list(_group_entry_points(group))


@functools.cache
def _group_entry_points(group: str) -> tuple:
    """The installed entry points of one group, found once per process."""
    return tuple(_installed_entry_points().select(group=group))


@functools.cache
def _installed_entry_points():
    """Every installed entry point, read once (reading them scans every installed distribution)."""
    return entry_points()


def load_file(path: str | Path) -> list[str]:
    """Imports a single Python file so that its decorators register what it declares.

    Returns:
        The mechanisms the file registered (recorded on its first import, so a file
        loaded again answers the same).

    Raises:
        BenchError: The file does not exist or fails to import.
    """
    path = Path(path)
    if not path.is_file():
        raise BenchError(f"no such file: {path}")
    for registry in (mechanisms, tasks, benchmarks, attacks, datasets):
        registry.discover()  # so that a plugin reusing a built-in name fails here, naming both
    module_name = f"bench_user_{path.stem}_{abs(hash(str(path.resolve()))) % 10**8}"
    if module_name in sys.modules:
        return list(_registered_by.get(module_name, ()))
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise BenchError(f"cannot import {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    before = set(mechanisms._items)
    try:
        spec.loader.exec_module(module)
    except BenchError:
        raise
    except ValueError as exc:
        del sys.modules[module_name]
        raise BenchError(f"{path}: {exc}") from None
    except Exception as exc:
        del sys.modules[module_name]
        raise BenchError(f"cannot import {path}: {type(exc).__name__}: {exc}") from None
    _registered_by[module_name] = [name for name in mechanisms._items if name not in before]
    return list(_registered_by[module_name])


def load_mechanism_file(path: str | Path) -> list[str]:
    """Imports a ``--mechanism-file``: a Python file that must register at least one mechanism.

    Returns:
        The mechanisms it registered.

    Raises:
        BenchError: The file does not exist, fails to import, or registers no mechanism
            (a file with a typo in its decorator, or the wrong file, would otherwise pass
            unnoticed until the mechanism's name is looked up).
    """
    names = load_file(path)
    if not names:
        raise BenchError(f"--mechanism-file {path} registers no mechanism (declare one with "
                         "@register_mechanism(\"NAME\") on a Mechanism class)")
    return names


_registered_by: dict[str, list[str]] = {}
"""Module name of a loaded file -> the mechanisms it registered."""


def is_file_module(module_name: str) -> bool:
    """Whether a module was imported from a single file by :func:`load_file` (a ``--mechanism-file``)."""
    return module_name in _registered_by


mechanisms: Registry = Registry("mechanism", ("mechanisms",), "bench.mechanisms")
tasks: Registry = Registry("task", ("tasks",), "bench.tasks")
benchmarks: Registry = Registry("benchmark", ("tasks",), "bench.core.benchmarks")
attacks: Registry = Registry("attack", ("attacks",), "bench.attacks")
datasets: Registry = Registry("dataset", ("bench.data.loaders", "bench.data.synthetic"), "bench.datasets")

register_mechanism = mechanisms.register
register_task = tasks.register
register_attack = attacks.register
register_dataset = datasets.register


REGISTRIES: tuple[Registry, ...] = (mechanisms, tasks, benchmarks, attacks, datasets)


def plugins_installed() -> bool:
    """Whether an installed distribution declares a plugin in any registry's entry-point group."""
    return any(_entry_points(registry.group) for registry in REGISTRIES)


def use_index(index: Index | None) -> Index | None:
    """Installs an index of the built-in names (None removes it); returns the one it replaces.

    While a registry has not been discovered and no plugin is installed, the index answers
    which names exist (``in``, :meth:`Registry.list`, an unknown name's error) and the
    attributes it holds (:meth:`Registry.attribute`), without importing the built-ins. The
    index must hold exactly what a discovery registers (:func:`builtin_index` works it out).
    """
    global _index
    previous, _index = _index, index
    return previous


def builtin_index(attributes: Mapping[str, tuple[str, ...]]) -> dict[str, dict[str, dict[str, Any]]] | None:
    """Returns kind -> name -> the named attributes of every built-in, once each registry holds built-ins only.

    Args:
        attributes: Kind ("mechanism") -> the attributes to record of each of its objects.

    Returns:
        None unless every registry has been discovered and holds nothing else (no plugin,
        no ``--mechanism-file``, nothing registered by hand): then what it holds is what a
        discovery registers.
    """
    if not all(r._discovered for r in REGISTRIES) or not only_builtins():
        return None
    return {r.kind: {name: {a: getattr(obj, a) for a in attributes.get(r.kind, ())} for name, obj in r._items.items()}
            for r in REGISTRIES}


def only_builtins() -> bool:
    """Whether the registries hold built-ins only: no plugin installed, no file loaded, nothing registered by hand."""
    return not plugins_installed() and not _registered_by and all(r.only_builtins() for r in REGISTRIES)


def untouched() -> bool:
    """Whether no registry holds anything yet (nothing discovered, nothing registered) and no plugin is installed."""
    return not plugins_installed() and not _registered_by and all(r.untouched() for r in REGISTRIES)


@contextlib.contextmanager
def scoped() -> Iterator[None]:
    """Snapshots every registry and restores them on exit (for tests)."""
    with mechanisms.scoped(), tasks.scoped(), benchmarks.scoped(), attacks.scoped(), datasets.scoped():
        yield
