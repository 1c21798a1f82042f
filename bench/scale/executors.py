"""Executors: run a grid's cells here, in worker processes, or on a Ray cluster.

Every worker runs a cell the same way (:func:`execute_cell`, through
:func:`bench.cell.run.execute`, the path ``bench run`` takes too): under a per-cell file lock
it checks that no FINISHED run of the cell exists, creates its run RUNNING, computes it and
logs it. A cell that raises is logged as a FAILED run carrying its error and traceback, and
the executor moves on.

This module imports no torch at import time, so a worker can choose its GPU first.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import sys
import time
import traceback
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from bench.errors import BenchError
from bench.scale.grid import Cell, CellOutcome
from bench.system.cpus import usable_cpus
from bench.system.pool import die_with_parent, exit_on_signals, tear_down

if TYPE_CHECKING:
    from bench.storage.tracking import Tracker
    from bench.system.progress import Display

EXECUTORS = ("local", "processes", "ray")


@dataclass(frozen=True)
class ExecutorConfig:
    """How a grid's cells are spread.

    Attributes:
        kind: ``local`` (this process), ``processes`` (one worker per visible GPU, or
            ``workers`` CPU workers) or ``ray`` (one Ray task per cell).
        workers: Worker processes (processes) or CPUs of a local Ray; None picks.
        ray_address: Address of an existing Ray cluster (None starts a local one).
        gpus_per_cell: GPUs a Ray task of one cell reserves on its node (its data-parallel
            training uses every GPU it sees).
        plugin_files: Python files registering mechanisms, loaded in every worker.
        verbose: Print the runner's progress lines.
        isolation: How the plugin files run: "" imported into each worker, ``bwrap`` or ``process``
            in an isolated worker process of their own (:mod:`bench.testing.isolated`; ``bench submit``).
    """

    kind: str = "local"
    workers: int | None = None
    ray_address: str | None = None
    gpus_per_cell: int = 1
    plugin_files: tuple[Path, ...] = ()
    verbose: bool = False
    isolation: str = ""


@dataclass(frozen=True)
class Slot:
    """What one worker process runs on.

    Attributes:
        device: Device name handed to the runner (``cpu`` or ``cuda``).
        visible_gpu: Value of CUDA_VISIBLE_DEVICES for the worker, or None.
        threads: Torch intra-op threads.
    """

    device: str
    visible_gpu: str | None
    threads: int


def run_cells(cells: Sequence[Cell], config: ExecutorConfig, on_done: Callable[[CellOutcome], None],
              display: "Display | None" = None) -> list[CellOutcome]:
    """Runs cells with the chosen executor; ``on_done`` is called once per cell as it ends.

    ``display`` shows each running cell's stage and loops (local and processes executors;
    Ray workers print their lines with ``verbose``).

    Raises:
        BenchError: Unknown executor, or the ray executor without Ray installed.
    """
    if config.kind not in EXECUTORS:
        raise BenchError(f"unknown executor {config.kind!r} (use {', '.join(EXECUTORS)})")
    if not cells:
        return []
    runner = {"local": _run_local, "processes": _run_processes, "ray": _run_ray}[config.kind]
    outcomes: list[CellOutcome] = []

    def record(outcome: CellOutcome) -> None:
        outcomes.append(outcome)
        on_done(outcome)

    if config.kind == "ray":
        _run_ray(list(cells), config, record)
    else:
        runner(list(cells), config, record, display)
    return outcomes


def worker_count(cells: Sequence[Cell], config: ExecutorConfig) -> int | None:
    """Returns how many cells run at once (None: as many as the Ray cluster allows)."""
    if config.kind == "local":
        return 1
    if config.kind == "processes":
        return len(slots(cells[0].config.device if cells else "auto", config.workers))
    return None if config.ray_address else config.workers or default_cpu_workers()


def default_cpu_workers() -> int:
    """Returns the default number of CPU workers: min(4, usable CPUs)."""
    return max(1, min(4, usable_cpus()))


# --- one cell -------------------------------------------------------------------------------


def execute_cell(cell: Cell, plugin_files: Sequence[Path] = (), log: Callable[[str], None] | None = None,
                 progress: Callable[..., Any] | None = None, isolation: str = "") -> CellOutcome:
    """Computes and logs one cell unless a FINISHED run of it exists; never raises for a failing cell.

    The cell takes the one path of :func:`bench.cell.run.execute` (cell lock, orphan check,
    skip if finished, run RUNNING, compute, log, FINISHED).

    Args:
        cell: The cell.
        plugin_files: Files registering mechanisms, imported first.
        isolation: "" to import them here, ``bwrap`` or ``process`` to run them isolated
            (:func:`bench.testing.isolated.load_isolated`: the worker this process already has, else a new one).
        log: Progress lines of the runner (the stage the cell enters).
        progress: Wraps the cell's long loops.

    Returns:
        ``skipped`` with the existing run, ``done`` with the new run, or ``failed`` with
        the error (also logged as a FAILED MLflow run).
    """
    from bench.cell.plan import plan
    from bench.cell.run import execute, one_line
    from bench.core.registry import load_file

    started = time.perf_counter()
    config = cell.config
    tracker = None
    try:
        if isolation and plugin_files:
            from bench.testing.isolated import load_isolated

            load_isolated(plugin_files, isolation)
        else:
            for path in plugin_files:
                load_file(path)
        tracker = open_tracker(config.results_dir, config.tracking_uri)
        planned = plan(config)
        if planned.key != cell.key:
            raise BenchError(f"cell key changed from {cell.key} to {planned.key} (mechanism or task code changed?)")
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:
        if tracker is not None:
            record_failure(tracker, cell, one_line(exc), traceback.format_exc())
        return CellOutcome(cell.key, cell.label, "failed", None, time.perf_counter() - started, error=one_line(exc)[:500])
    try:
        return execute(planned, tracker, log=log or (lambda message: None), progress=progress)
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:  # its run is already marked FAILED
        return CellOutcome(cell.key, cell.label, "failed", None, time.perf_counter() - started, error=one_line(exc)[:500])


def record_failure(tracker: "Tracker", cell: Cell, error: str, trace: str) -> None:
    """Logs a failed cell as a FAILED MLflow run with its error and traceback (error.txt)."""
    cfg = cell.config
    tags = {"bench.cell_key": cell.key, "bench.task": cfg.task, "bench.mechanism": cfg.mechanism,
            "bench.seed": str(cfg.seed), "bench.profile": cfg.profile, "bench.error": error[:4000],
            "bench.host": socket.gethostname(), "bench.pid": str(os.getpid())}  # killed before it ends: an orphan
    try:
        run = tracker.client.create_run(tracker.experiment_id, run_name=cell.label[:250], tags=tags)
        try:
            tracker.client.log_text(run.info.run_id, trace, "error.txt")
        finally:
            tracker.client.set_terminated(run.info.run_id, "FAILED")
    except Exception as exc:  # the tracking server itself may be what failed
        print(f"[bench] could not record the failure of {cell.label} in MLflow: {exc}", file=sys.stderr)


def open_tracker(results_dir: Path, uri: str | None) -> "Tracker":
    """Returns this process's Tracker of a results directory (one per directory and URI)."""
    return _tracker(str(results_dir), uri)


@lru_cache(maxsize=4)
def _tracker(results_dir: str, uri: str | None) -> "Tracker":
    from bench.storage.tracking import Tracker

    return Tracker(Path(results_dir), uri)


def _printer(prefix: str) -> Callable[[str], None]:
    def log(message: str) -> None:
        print(f"[bench{prefix}] {message}", file=sys.stderr, flush=True)

    return log


# --- local ----------------------------------------------------------------------------------


def _run_local(cells: list[Cell], config: ExecutorConfig, on_done: Callable[[CellOutcome], None],
               display: "Display | None") -> None:
    if display is None:
        log = _printer("") if config.verbose else None
        for cell in cells:
            on_done(execute_cell(cell, config.plugin_files, log, isolation=config.isolation))
        return
    emitter = display.emitter(0)
    for cell in cells:
        emitter.start(cell.label)
        try:
            outcome = execute_cell(cell, config.plugin_files, emitter.log, emitter.progress, config.isolation)
        finally:
            emitter.end()
        on_done(outcome)


# --- processes ------------------------------------------------------------------------------


def slots(device: str, workers: int | None) -> list[Slot]:
    """Returns one slot per worker: one per visible GPU, else ``workers`` CPU workers.

    CPU workers share the usable CPUs evenly (:mod:`bench.system.cpus`: affinity and cgroup quota;
    torch threads = CPUs // workers, at least 1).

    Raises:
        BenchError: A CUDA device was asked for and none is visible, or a bad worker count.
    """
    if workers is not None and workers < 1:
        raise BenchError(f"--workers must be at least 1, got {workers}")
    gpus = _visible_gpus() if device != "cpu" else []
    if device.startswith("cuda") and not gpus:
        raise BenchError(f"--device {device}: CUDA is not available on this machine (use --device cpu or auto)")
    cores = usable_cpus()
    if gpus:
        chosen = gpus[: workers] if workers else gpus
        return [Slot("cuda", gpu, max(1, cores // len(chosen))) for gpu in chosen]
    count = workers or default_cpu_workers()
    return [Slot("cpu", None, max(1, cores // count)) for _ in range(count)]


def _visible_gpus() -> list[str]:
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [g.strip() for g in listed.split(",") if g.strip() and g.strip() != "-1"]
    try:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    except ImportError:
        return []


_SLOT: Slot | None = None
_EMITTER: Any = None


def _init_worker(queue: Any, verbose: bool, events: Any = None, parent_pid: int | None = None) -> None:
    global _SLOT, _EMITTER
    if parent_pid is not None:
        die_with_parent(parent_pid)  # first: a worker must not outlive the grid (bench/system/pool.py)
    index, _SLOT = queue.get()
    if events is not None:
        from bench.system.progress import Emitter, queue_sender

        _EMITTER = Emitter(queue_sender(events), index)
    if _SLOT.visible_gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = _SLOT.visible_gpu
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(_SLOT.threads)
    import torch

    torch.set_num_threads(_SLOT.threads)
    with contextlib.suppress(RuntimeError):
        torch.set_num_interop_threads(1)


def _worker_cell(cell: Cell, plugin_files: tuple[Path, ...], verbose: bool, isolation: str = "") -> CellOutcome:
    assert _SLOT is not None
    cell = dataclasses.replace(cell, config=dataclasses.replace(cell.config, device=_SLOT.device))
    if _EMITTER is None:
        prefix = f" gpu {_SLOT.visible_gpu}" if _SLOT.visible_gpu is not None else f" pid {os.getpid()}"
        return execute_cell(cell, plugin_files, _printer(prefix) if verbose else None, isolation=isolation)
    _EMITTER.start(cell.label)
    try:
        return execute_cell(cell, plugin_files, _EMITTER.log, _EMITTER.progress, isolation)
    finally:
        _EMITTER.end()


def _run_processes(cells: list[Cell], config: ExecutorConfig, on_done: Callable[[CellOutcome], None],
                   display: "Display | None") -> None:
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    plan = slots(cells[0].config.device, config.workers)
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    for index, slot in enumerate(plan):
        queue.put((index, slot))
    events = context.Queue() if display is not None else None
    pool = ProcessPoolExecutor(max_workers=len(plan), mp_context=context, initializer=_init_worker,
                               initargs=(queue, config.verbose, events, os.getpid()))
    try:
        with exit_on_signals():  # SIGTERM/SIGHUP reach the teardown below instead of ending this process
            futures = {pool.submit(_worker_cell, cell, config.plugin_files, config.verbose, config.isolation): cell
                       for cell in cells}
            waiting = set(futures)
            while waiting:
                finished, waiting = wait(waiting, timeout=0.25 if display is not None else None,
                                         return_when=FIRST_COMPLETED)
                if display is not None:
                    display.drain(events)
                for future in finished:
                    cell = futures[future]
                    try:
                        outcome = future.result()
                    except BrokenProcessPool:
                        outcome = CellOutcome(cell.key, cell.label, "failed", error="a worker process died (out of "
                                              "memory or killed); rerun the grid to retry")
                    on_done(outcome)
    except BaseException as exc:  # a second signal now ends this process; its workers then die with it
        tear_down(pool, exc, lambda: _sweep_orphans(cells[0]))
        raise
    pool.shutdown(wait=True)


def _sweep_orphans(cell: Cell) -> int:
    from bench.cell.once import sweep_orphans

    return sweep_orphans(open_tracker(cell.config.results_dir, cell.config.tracking_uri))


# --- ray ------------------------------------------------------------------------------------


def _ray_cell(cell: Cell, shipped: Any, device: str, verbose: bool, isolation: str = "") -> CellOutcome:
    from bench.scale.raycluster import enter_worker

    plugin_files = enter_worker(shipped)  # the shipped copies (see bench.scale.raycluster)
    if device == "cpu":
        import torch

        torch.set_num_threads(1)
    cell = dataclasses.replace(cell, config=dataclasses.replace(cell.config, device=device))
    return execute_cell(cell, plugin_files, _printer(f" ray {os.getpid()}") if verbose else None, isolation=isolation)


def _run_ray(cells: list[Cell], config: ExecutorConfig, on_done: Callable[[CellOutcome], None]) -> None:
    """Ships the code through the job's runtime_env, checks every node, then runs one task per cell."""
    try:
        import ray
    except ImportError:
        raise BenchError("the ray executor needs Ray: pip install 'ray>=2.9'") from None
    from bench.scale.raycluster import absolute_data_roots, check_cluster, connect, shipment

    uri = cells[0].config.tracking_uri or ""
    if config.ray_address and uri.startswith(("sqlite:", "file:")):
        print("[bench] warning: cells on other Ray nodes log to a local MLflow file unless it is on a shared file "
              "system; pass --tracking-uri http://HOST:PORT of a tracking server", file=sys.stderr)
    cells = absolute_data_roots(cells)  # a worker's working directory is not the driver's
    started_here = not ray.is_initialized()
    with shipment(config.plugin_files, ship=started_here) as shipped:
        if started_here:
            connect(ray, config.ray_address, config.workers or default_cpu_workers(), len(_visible_gpus()),
                    config.verbose, shipped.runtime_env)
        try:
            gpu = ray.cluster_resources().get("GPU", 0) > 0 and cells[0].config.device != "cpu"
            nodes = check_cluster(ray, cells, shipped, gpu)
            what = (f"code shipped ({len(shipped.plugins)} mechanism file(s))" if started_here
                    else "Ray was started by the caller: its nodes' code is used")
            print(f"[bench] ray: {nodes} node(s) see the cache, data and tracking store; {what}", file=sys.stderr,
                  flush=True)
            remote = ray.remote(num_gpus=config.gpus_per_cell if gpu else 0, num_cpus=1)(_ray_cell)
            device = "cuda" if gpu else "cpu"
            refs = {remote.remote(cell, shipped, device, config.verbose, config.isolation): cell for cell in cells}
            waiting = list(refs)
            while waiting:
                ready, waiting = ray.wait(waiting, num_returns=1)
                for ref in ready:
                    cell = refs[ref]
                    try:
                        outcome = ray.get(ref)
                    except Exception as exc:  # the task or its worker died
                        outcome = CellOutcome(cell.key, cell.label, "failed", error=f"Ray task failed: "
                                              f"{type(exc).__name__}: " + " ".join(str(exc).split())[:300])
                    on_done(outcome)
        finally:
            if started_here:
                ray.shutdown()
