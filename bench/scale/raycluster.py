"""The ray executor's cluster side: what is shipped to Ray workers, and what they must see.

Shipped, through the job's ``runtime_env``: PrivBench's five top-level packages as
``py_modules`` (without caches, virtualenvs or results) and the ``--mechanism-file`` files,
copied into a ``working_dir`` (as the package ``_bench_plugins``), so that a worker never
imports a stale copy that happens to sit at the driver's paths on its node. Not shipped:
third-party dependencies (installed on every node), the data, the cache and the tracking
store, which every node must see at the driver's paths.

Before any cell starts, :func:`check_cluster` runs one small task on every node that can run
a cell. Each must see the data root, the cache directory (the *same* file system: it reads a
random token the driver has just written there), the tracking store, PrivBench's code as
shipped and the mechanism files. The first thing a node cannot see stops the grid in one line.

Like :mod:`bench.scale.executors`, this module imports neither torch nor Ray at import time.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import os
import secrets
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from bench.errors import BenchError

if TYPE_CHECKING:
    from bench.scale.grid import Cell

PACKAGES = ("bench", "tasks", "mechanisms", "attacks", "leaderboard")
"""PrivBench's top-level packages, shipped to every worker."""
EXCLUDES = ["__pycache__/", "*.py[cod]", ".pytest_cache/", ".ipynb_checkpoints/", ".git/", ".venv/", ".cache/",
            "results/", "*.egg-info/"]
"""Gitignore-style patterns of what is never shipped (Ray's runtime_env ``excludes``)."""
PLUGIN_PACKAGE = "_bench_plugins"
"""The package, in the shipped working_dir, that holds the --mechanism-file copies."""
CHECK_TIMEOUT_S = 300
TOKEN_PREFIX = ".bench-ray-check-"
_CODE_SUFFIXES = {".py", ".yaml", ".yml", ".json", ".html", ".css", ".js"}
_JUNK_DIRS = {"__pycache__", ".pytest_cache", ".ipynb_checkpoints", ".git", ".venv", ".cache", "results"}


@dataclass(frozen=True)
class Shipment:
    """What a job ships, and how a worker finds it.

    Attributes:
        runtime_env: The job's runtime_env (None: Ray was started by the caller; nothing is
            shipped and workers use what their nodes have at the driver's paths).
        plugins: One locator per mechanism file: a path inside :data:`PLUGIN_PACKAGE`
            when shipped, else the driver's absolute path.
        plugin_digests: sha256 of each mechanism file, as the driver loaded it.
        code_digest: Digest of the packages' source files (see :func:`code_digest`).
        driver_cwd: The driver's working directory (workers move there when it exists).
        commit: The driver's git commit (the shipped copy is no git checkout).
    """

    runtime_env: dict[str, Any] | None
    plugins: tuple[str, ...]
    plugin_digests: tuple[str, ...]
    code_digest: str
    driver_cwd: str
    commit: str


@contextlib.contextmanager
def shipment(plugin_files: Sequence[Path], ship: bool = True) -> Iterator[Shipment]:
    """Yields the Shipment of the packages and ``plugin_files``; its staging folder lives until exit.

    Args:
        plugin_files: The --mechanism-file files (as loaded by the driver).
        ship: Build a runtime_env (False: Ray is already initialized by the caller, whose
            job's runtime_env cannot change; workers then read the files at the driver's paths).
    """
    from bench.cell.provenance import git_sha

    files = [Path(p).resolve() for p in plugin_files]
    digests = tuple(_file_digest(p) for p in files)
    common = dict(plugin_digests=digests, code_digest=code_digest(package_dirs()), driver_cwd=os.getcwd(),
                  commit=git_sha())
    if not ship:
        yield Shipment(None, tuple(str(p) for p in files), **common)
        return
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as staging:
        package = Path(staging) / PLUGIN_PACKAGE
        package.mkdir()
        (package / "__init__.py").write_text('"""--mechanism-file copies shipped by bench grid --executor ray."""\n')
        located = []
        for number, path in enumerate(files):
            (package / str(number)).mkdir()
            shutil.copy2(path, package / str(number) / path.name)
            located.append(f"{number}/{path.name}")
        env = {"py_modules": [str(d) for d in package_dirs()], "working_dir": staging, "excludes": list(EXCLUDES)}
        yield Shipment(env, tuple(located), **common)


def package_dirs() -> list[Path]:
    """Returns the directories of the five packages as this process imports them."""
    dirs = []
    for name in PACKAGES:
        module = importlib.import_module(name)
        paths = list(getattr(module, "__path__", []))
        if len(paths) != 1:
            raise BenchError(f"cannot ship the package {name!r}: it is not one directory ({paths})")
        dirs.append(Path(paths[0]).resolve())
    return dirs


def code_digest(dirs: Sequence[Path]) -> str:
    """Returns a digest of the source and data files (.py, .yaml, templates) under ``dirs``, junk excluded."""
    digest = hashlib.sha256()
    for root in dirs:
        for path in sorted(Path(root).rglob("*")):
            relative = path.relative_to(root)
            if path.suffix not in _CODE_SUFFIXES or _JUNK_DIRS.intersection(relative.parts[:-1]) or not path.is_file():
                continue
            digest.update(f"{root.name}/{relative.as_posix()}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _file_digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# --- in the worker --------------------------------------------------------------------------


def plugin_paths(plugins: Sequence[str]) -> tuple[Path, ...]:
    """Returns where this worker finds the mechanism files (shipped copies, or the driver's paths)."""
    if all(Path(p).is_absolute() for p in plugins):
        return tuple(Path(p) for p in plugins)
    base = Path(importlib.import_module(PLUGIN_PACKAGE).__file__).parent  # type: ignore[arg-type]
    return tuple(base / p for p in plugins)


def enter_worker(shipped: Shipment) -> tuple[Path, ...]:
    """Prepares a worker for a cell; returns the mechanism files to load.

    The shipped code reports the driver's commit, and the worker moves to the driver's
    working directory where its node has it (relative paths then mean what they meant there).
    """
    files = plugin_paths(shipped.plugins)
    if shipped.runtime_env is not None:
        os.environ["BENCH_GIT_SHA"] = shipped.commit
        if os.path.isdir(shipped.driver_cwd) and os.getcwd() != shipped.driver_cwd:
            os.chdir(shipped.driver_cwd)
    return files


@dataclass(frozen=True)
class Probe:
    """One thing a worker must see.

    Attributes:
        what: ``cache``, ``tracking`` (a directory of a local tracking store), or ``data``.
        path: The directory.
        token_name: Name of the token file the driver wrote in it ("" for ``data``).
        token: Its content.
    """

    what: str
    path: str
    token_name: str = ""
    token: str = ""


_NAMES = {"cache": "cache directory", "tracking": "tracking store directory", "data": "data root"}


def look(probes: Sequence[Probe], stores: Sequence[tuple[str, str, bool]], shipped: Shipment) -> str | None:
    """Runs in a Ray worker: returns what it cannot see (one phrase), or None.

    Args:
        probes: Directories to see (with tokens for those that must be the driver's).
        stores: (results_dir, tracking URI, probe) of each tracking store; probe False skips
            opening a local database the driver has not created yet.
        shipped: The job's Shipment (code digest, mechanism files).
    """
    shared = "every node must see it at the same path as the driver, on a shared file system"
    for probe in probes:
        name, path = _NAMES[probe.what], Path(probe.path)
        if not path.is_dir():
            return f"cannot see the {name} {path} (no such directory there; {shared})"
        if probe.token_name:
            try:
                seen = (path / probe.token_name).read_text()
            except OSError:
                seen = None
            if seen != probe.token:
                return (f"sees another {name} at {path} than the driver (the check file the driver has just written "
                        f"there is not there; {shared})")
            if not os.access(path, os.W_OK | os.X_OK):
                return f"cannot write to the {name} {path}"
        elif not os.access(path, os.R_OK | os.X_OK):
            return f"cannot read the {name} {path}"
    for results_dir, uri, probe in stores:
        if probe:
            from bench.storage.tracking import Tracker

            try:
                Tracker(Path(results_dir), uri, create=False)
            except BenchError as exc:
                return f"cannot use the tracking store: {exc}"
    try:
        files = plugin_paths(shipped.plugins)
    except ImportError as exc:
        return f"cannot find the shipped mechanism files ({exc})"
    for path, digest in zip(files, shipped.plugin_digests):
        if not path.is_file():
            return f"cannot see the mechanism file {path} ({shared})"
        if _file_digest(path) != digest:
            return f"sees another version of the mechanism file {path} than the driver"
    dirs = package_dirs()
    if code_digest(dirs) != shipped.code_digest:
        return (f"runs other PrivBench code ({dirs[0]}) than the driver: install the same version on every node, "
                "or let bench start or connect to Ray (--ray-address) so that it ships its code")
    return None


# --- on the driver ---------------------------------------------------------------------------


def connect(ray: Any, address: str | None, num_cpus: int, num_gpus: int, verbose: bool,
            runtime_env: dict[str, Any] | None) -> None:
    """Connects to the cluster at ``address`` (or starts a local Ray) with the job's runtime_env.

    Raises:
        BenchError: Ray could not start, the address is unreachable, or Ray refused the
            runtime_env (too large to upload, say).
    """
    options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": verbose, "logging_level": "ERROR",
                               "configure_logging": True, "runtime_env": runtime_env}
    if address:
        _probe(address)
    try:
        if address:
            ray.init(address=address, **options)
        else:
            # "local": a new local Ray even where another one runs (Ray would join that one and refuse num_cpus)
            ray.init(address="local", num_cpus=num_cpus, num_gpus=num_gpus, object_store_memory=128 * 1024**2,
                     **options)
    except Exception as exc:
        where = f"the Ray cluster at {address}" if address else "a local Ray"
        raise BenchError(f"cannot start or reach {where} with the shipped code: {_first_line(exc)}") from None


def _probe(address: str, timeout_s: float = 5.0) -> None:
    """Raises a one-line BenchError unless a ``host:port`` (or ``ray://``) address answers (Ray retries for minutes)."""
    import socket

    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise BenchError(f"cannot reach the Ray cluster at {address} (--ray-address): "
                         f"{exc.strerror or type(exc).__name__}") from None


def absolute_data_roots(cells: Sequence["Cell"]) -> list["Cell"]:
    """Returns the cells with a relative data root made absolute (workers run elsewhere)."""
    import dataclasses

    out = []
    for cell in cells:
        root = cell.config.data_root
        if root is not None and not Path(root).is_absolute():
            cell = dataclasses.replace(cell, config=dataclasses.replace(cell.config, data_root=Path(root).resolve()))
        out.append(cell)
    return out


def probes(cells: Sequence["Cell"], token: str) -> list[Probe]:
    """Returns the directories the cells need on every node (cache, local tracking store, data root)."""
    name = f"{TOKEN_PREFIX}{token[:16]}"
    out: dict[tuple[str, str], Probe] = {}
    for cell in cells:
        cfg = cell.config
        out.setdefault(("cache", str(cfg.cache)), Probe("cache", str(cfg.cache), name, token))
        local = _local_store(_uri(cell))
        if local is not None:
            out.setdefault(("tracking", str(local)), Probe("tracking", str(local), name, token))
        if cfg.data_root is not None and Path(cfg.data_root).is_dir():  # one the driver cannot see is not needed
            out.setdefault(("data", str(cfg.data_root)), Probe("data", str(Path(cfg.data_root).resolve())))
    return list(out.values())


def _local_store(uri: str) -> Path | None:
    """Returns the directory of a local tracking store (sqlite database or file store), else None."""
    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///"):]).parent
    if uri.startswith("file:"):
        from urllib.parse import urlparse

        return Path(urlparse(uri).path)
    return None


def _uri(cell: "Cell") -> str:
    from bench.storage.tracking import tracking_uri

    return tracking_uri(cell.config.results_dir, cell.config.tracking_uri)


def _write_token(directory: Path, name: str, token: str) -> None:
    (directory / name).write_text(token)


@contextlib.contextmanager
def _tokens(found: Sequence[Probe]) -> Iterator[None]:
    """Writes each probe's token file (creating missing directories); removes all of it on exit."""
    created: list[Path] = []
    written: list[Path] = []
    try:
        for probe in found:
            if not probe.token_name:
                continue
            path = Path(probe.path)
            missing = [p for p in (path, *path.parents) if not p.exists()]
            try:
                path.mkdir(parents=True, exist_ok=True)
                created.extend(missing)  # deepest first
                _write_token(path, probe.token_name, probe.token)
                written.append(path / probe.token_name)
            except OSError as exc:
                raise BenchError(f"cannot write to the {_NAMES[probe.what]} {path}: {exc.strerror or exc}") from None
        yield
    finally:
        for path in written:
            with contextlib.suppress(OSError):
                path.unlink()
        for path in created:
            with contextlib.suppress(OSError):
                path.rmdir()  # only if still empty: cells may have started using it


def target_nodes(ray: Any, gpu: bool) -> list[dict[str, Any]]:
    """Returns the live nodes that can run a cell (a CPU, and a GPU when cells use one)."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    return [n for n in nodes if n.get("Resources", {}).get("CPU", 0) >= 1
            and (not gpu or n.get("Resources", {}).get("GPU", 0) >= 1)]


def check_cluster(ray: Any, cells: Sequence["Cell"], shipped: Shipment, gpu: bool,
                  timeout_s: float = CHECK_TIMEOUT_S) -> int:
    """Checks from a worker on every node that can run a cell that it sees what the cells need.

    Returns:
        The number of nodes checked.

    Raises:
        BenchError: One line naming the first node and what it cannot see; nothing is
            left behind (the token files and the directories made for them are removed).
    """
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    token = secrets.token_hex(16)
    found = probes(cells, token)
    stores = sorted({(str(c.config.results_dir), _uri(c), _store_exists(_uri(c))) for c in cells})
    remote = ray.remote(num_cpus=0, max_retries=0)(look)
    nodes = target_nodes(ray, gpu)
    with _tokens(found):
        if nodes:
            refs = {remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
                    .remote(found, stores, shipped): _node_name(n) for n in nodes}
        else:  # none yet (an autoscaling cluster): wherever a cell would go
            refs = {ray.remote(num_cpus=1, max_retries=0)(look).remote(found, stores, shipped): "(any)"}
        ready, pending = ray.wait(list(refs), num_returns=len(refs), timeout=timeout_s)
        for ref in pending:
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
        problems = []
        for ref, node in refs.items():
            if ref not in ready:
                problems.append((node, f"did not answer within {timeout_s:g} s (busy, or unable to set up the shipped "
                                       "code)"))
                continue
            try:
                problem = ray.get(ref)
            except Exception as exc:  # the runtime_env, an import or the task itself failed there
                problem = f"could not run the check ({_first_line(exc)}; are PrivBench's dependencies installed there?)"
            if problem:
                problems.append((node, problem))
    if problems:
        if code_digest(package_dirs()) != shipped.code_digest:  # edited between the digest and the upload
            raise BenchError("PrivBench's files changed here while the grid was starting (being edited?); run it again")
        node, problem = problems[0]
        more = f" (and {len(problems) - 1} more node(s))" if len(problems) > 1 else ""
        raise BenchError(f"the Ray worker on node {node} {problem}{more}")
    return len(refs)


def _store_exists(uri: str) -> bool:
    """Whether the worker should open the store: not a local sqlite database the driver has not created yet."""
    return not uri.startswith("sqlite:///") or Path(uri[len("sqlite:///"):]).exists()


def _node_name(node: dict[str, Any]) -> str:
    return f"{node.get('NodeManagerAddress', '?')} ({str(node.get('NodeID', ''))[:8]})"


def _first_line(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None)
    exc = cause if isinstance(cause, BaseException) else exc
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]
