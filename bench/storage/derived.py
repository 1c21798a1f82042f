"""Answers worked out from the code alone, kept on disk under the digest of everything they depend on.

Some of what a command prints takes seconds to work out and changes only when the code does:
which names the registries hold (finding them imports every built-in module, and torch with
them), what ``bench list`` prints of them, which cells the shipped suites declare (planning
every one of their ~420 cells, :func:`leaderboard.declare.suite_declarations`), which of an
entry's cells are stale (planning its cells, :func:`leaderboard.staleness.check_staleness`),
what checking an entry finds (:func:`leaderboard.verification.check_entry`) and a board's plot
files (:func:`leaderboard.plot.frontier_plot`). While the ``bench`` command runs
(:func:`enabled`), each such answer is kept in a file named by a digest of what it depends on:

- every file of PrivBench's packages (``bench``, ``mechanisms``, ``tasks``, ``attacks``,
  ``leaderboard``; not the entries, which are data: an answer about one names its bytes)
  and where they are, the Python version and the installed distributions with their
  versions (:func:`code_digest`);
- the answer's own inputs (the suites' texts, an entry's content, a board's content and
  matplotlib's settings), which its caller names.

A file is read back only under the same digest, so an edited file, an upgraded library or
other inputs work the answer out again; a file whose recorded key differs is not read.
Answers are read only while the registries are untouched (nothing registered yet in this
process, no plugin installed; :func:`bench.core.registry.untouched`) and kept only when
they hold nothing but built-ins (:func:`bench.core.registry.only_builtins`). What planning
found depends on the machine too, so its answers are read only where no GPU could be used
(:func:`no_gpu`) and the memory its checks needed is available (:func:`fits`).

Where: ``$BENCH_DERIVED`` if set; else ``.cache/derived`` in the checkout PrivBench runs
from (a source checkout, as ``pip install -e .`` leaves it: the folder is git-ignored); else
(an installed package) ``$XDG_CACHE_HOME/privbench/derived`` (``~/.cache/privbench/derived``).
A folder that cannot be written or read leaves every answer to be worked out again; nothing
fails for it. Deleting the folder is always safe.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import importlib.util
import json
import os
import platform
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, Iterator, Mapping

__all__ = ["ENV", "FORMAT", "INDEXED", "PACKAGES", "code_digest", "enabled", "fits", "folder", "is_enabled", "keep",
           "no_gpu", "recall", "record_registries"]

ENV = "BENCH_DERIVED"
"""The environment variable that names the folder of the answers."""
FORMAT = 1
"""Bumped when what a file holds changes shape."""
PACKAGES = ("bench", "mechanisms", "tasks", "attacks", "leaderboard")
"""PrivBench's packages: every file in them is code (or read by code), but for :data:`DATA`."""
DATA = (("leaderboard", "entries"),)
"""Folders of data inside the packages: an answer about an entry names the entry's bytes itself."""
INDEXED: Mapping[str, tuple[str, ...]] = {"mechanism": ("version",), "task": ("entry_settings",)}
"""The attributes of registered objects the index records (:meth:`bench.core.registry.Registry.attribute`)."""
GPU_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd", "/dev/dxg")
"""Device files whose presence means torch might find a GPU (NVIDIA, AMD ROCm, WSL)."""

_enabled: contextvars.ContextVar[bool] = contextvars.ContextVar("bench_derived_enabled", default=False)


def folder() -> Path:
    """Returns the folder of the answers (see the module's docstring)."""
    named = os.environ.get(ENV)
    if named:
        return Path(named)
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file() and (checkout / "bench").is_dir():
        return checkout / ".cache" / "derived"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "privbench" / "derived"


@functools.cache
def code_digest() -> str:
    """Returns the SHA-256 of every file of PrivBench's packages, the Python version and the installed distributions.

    Reading the ~320 files takes some 15 ms; it is done once per process.
    """
    digest = hashlib.sha256()
    digest.update(json.dumps([FORMAT, sys.version, sys.platform, platform.machine(), _distributions()]).encode())
    for package in PACKAGES:
        root = _package_folder(package)
        if root is None:
            digest.update(f"\0missing {package}".encode())
            continue
        digest.update(f"\0{package} at {root}".encode())  # another copy may differ in what holds its paths
        skipped = {root.joinpath(*parts[1:]) for parts in DATA if parts[0] == package}
        for path in _files(root, skipped):
            digest.update(f"\0{package}/{path.relative_to(root).as_posix()}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _package_folder(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)  # a top-level name: found, not imported
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return Path(locations[0]) if locations else None


def _files(root: Path, skipped: set[Path]) -> list[Path]:
    found = []
    for here, folders, files in os.walk(root):
        folders[:] = sorted(f for f in folders if f != "__pycache__" and Path(here, f) not in skipped)
        found += [Path(here, f) for f in sorted(files) if not f.endswith((".pyc", ".pyo"))]
    return found


def _distributions() -> list[str]:
    """Returns the installed distributions with their versions (the names of their metadata folders), sorted.

    The current folder is not searched (``python -m bench`` puts it on the path, the
    ``bench`` script does not): one installation has one digest wherever it runs from.
    """
    names: set[str] = set()
    try:
        here = os.path.realpath(os.getcwd())
    except OSError:  # the current folder was deleted
        here = ""
    for entry in sys.path:
        if not entry or os.path.realpath(entry) == here:
            continue
        try:
            with os.scandir(entry) as listing:
                names.update(e.name for e in listing if e.name.endswith((".dist-info", ".egg-info")))
        except OSError:
            continue
    return sorted(names)


def _key(kind: str, inputs: Any) -> str:
    text = json.dumps([FORMAT, kind, code_digest(), inputs], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _path(kind: str, key: str) -> Path:
    return folder() / f"{kind}-{key[:32]}.json"


def recall(kind: str, inputs: Any) -> Any:
    """Returns the answer kept for ``kind`` under these inputs and this code, or None.

    Args:
        kind: What the answer is (``suites``), a file-name-safe word.
        inputs: What the answer depends on besides the code (JSON-serialisable).
    """
    if not is_enabled():
        return None
    try:
        key = _key(kind, inputs)
        data = json.loads(_path(kind, key).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):  # no answer kept, or a file that cannot be read
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("key") != key:
        return None
    return data.get("value")


def keep(kind: str, inputs: Any, value: Any) -> None:
    """Keeps an answer for ``kind`` under these inputs and this code (written whole, or not at all)."""
    if not is_enabled():
        return
    try:
        key = _key(kind, inputs)
        target = _path(kind, key)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{kind}-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump({"format": FORMAT, "kind": kind, "key": key, "value": value}, handle)  # dicts keep their order
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except (OSError, TypeError, ValueError):
        pass  # an answer that cannot be kept is worked out again next time


def no_gpu() -> bool:
    """Whether torch could find no GPU here (no NVIDIA, ROCm or WSL device file): planning then runs on the CPU."""
    return not any(os.path.exists(node) for node in GPU_NODES)


def fits(peak: Any) -> bool:
    """Whether the memory that planning's checks needed at most (``peak`` bytes) is available now."""
    from bench.system.bounds import available_memory

    return isinstance(peak, (int, float)) and available_memory() >= peak


def is_enabled() -> bool:
    """Whether answers are kept and read in this context (:func:`enabled`)."""
    return _enabled.get()


class _Index:
    """The registries' built-in names, read from the answer :func:`record_registries` kept."""

    def __init__(self) -> None:
        self._kinds: Mapping[str, Any] | None = None
        self._read = False

    def names(self, kind: str) -> Mapping[str, Mapping[str, Any]] | None:
        if not self._read:
            self._read = True
            value = recall("registries", {"attributes": INDEXED})
            self._kinds = value if isinstance(value, dict) else None
        found = (self._kinds or {}).get(kind)
        return found if isinstance(found, dict) else None


def record_registries() -> None:
    """Keeps the registries' built-in names once a command has discovered them all (else does nothing).

    A command that discovered some registries (``bench run`` plans a cell) has imported what
    the others need: they are discovered here too, at little cost, so that the next command
    finds every name in the index.
    """
    from bench.core import registry

    if not is_enabled() or not any(r._discovered for r in registry.REGISTRIES) or not registry.only_builtins():
        return
    if recall("registries", {"attributes": INDEXED}) is not None:
        return
    try:
        with warnings.catch_warnings():  # the command has said what it had to; this says nothing more
            warnings.simplefilter("ignore")
            for table in registry.REGISTRIES:
                table.discover()
    except Exception:  # noqa: BLE001 (a discovery that fails here fails where a command needs it)
        return
    index = registry.builtin_index(INDEXED)
    if index is not None:
        keep("registries", {"attributes": INDEXED}, _json_ready(index))  # TypeError: an attribute JSON cannot hold


def _json_ready(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"not kept: {type(value).__name__}")


@contextlib.contextmanager
def enabled() -> Iterator[None]:
    """Keeps and reads answers, and answers the registries' names from the index, within this context.

    On the way out (or out with a :class:`~bench.errors.BenchError`), the registries' names are
    recorded where the command discovered them.
    """
    from bench.core import registry
    from bench.errors import BenchError

    token = _enabled.set(True)
    previous = registry.use_index(_Index())
    try:
        try:
            yield
        except BenchError:  # a mistyped name found by a discovery: the next one is answered from the index
            _record_quietly()
            raise
        _record_quietly()
    finally:
        registry.use_index(previous)
        _enabled.reset(token)


def _record_quietly() -> None:
    try:
        record_registries()
    except Exception:  # noqa: BLE001 (keeping an answer never fails a command)
        pass
