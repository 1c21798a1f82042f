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
"""

from __future__ import annotations

import contextlib
import difflib
import fnmatch
import importlib
import importlib.util
import pkgutil
import sys
import warnings
from importlib.metadata import entry_points
from pathlib import Path
from typing import Callable, Generic, Iterator, TypeVar

from bench.errors import BenchError

T = TypeVar("T")


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
            if isinstance(obj, type):
                obj.name = name  # type: ignore[attr-defined]
            return obj

        return decorator

    def get(self, name: str) -> T:
        """Returns the object registered under ``name``.

        Raises:
            BenchError: No such name; the message suggests the closest one.
        """
        self.discover()
        try:
            return self._items[name]
        except KeyError:
            close = difflib.get_close_matches(name, list(self._items), n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise BenchError(
                f"unknown {self.kind} {name!r}{hint} (see 'bench list {self.kind}s')"
            ) from None

    def list(self, pattern: str = "*") -> list[str]:
        """Returns the sorted names that match a shell-style wildcard pattern."""
        self.discover()
        return sorted(n for n in self._items if fnmatch.fnmatchcase(n, pattern))

    def __contains__(self, name: str) -> bool:
        self.discover()
        return name in self._items

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
    module = importlib.import_module(package)
    for info in pkgutil.iter_modules(module.__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{package}.{info.name}")


def _entry_points(group: str):
    return list(entry_points(group=group))


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


@contextlib.contextmanager
def scoped() -> Iterator[None]:
    """Snapshots every registry and restores them on exit (for tests)."""
    with mechanisms.scoped(), tasks.scoped(), benchmarks.scoped(), attacks.scoped(), datasets.scoped():
        yield
