"""One cell, read downward: the single place that calls its steps, in their order.

plan (:mod:`~bench.cell.plan`) -> data (:mod:`~bench.cell.data`) -> release
(:mod:`~bench.cell.release`) -> task (:mod:`~bench.cell.task`) -> attacks
(:mod:`~bench.cell.attacks`) -> result (:mod:`~bench.cell.result`) -> tracking
(:mod:`~bench.cell.tracking`). Every ``bench run``, grid worker, tune trial and Ray task
takes this path:

1. :func:`bench.cell.plan.plan` has validated everything and written nothing;
2. the tracking store was probed when its :class:`~bench.storage.tracking.Tracker` opened;
3. :func:`execute` takes the cell's lock, which lives with the tracking store
   (``<results>/locks/<key>.lock``; :func:`~bench.cell.once.cell_locks`), marks runs of the
   cell whose process died as FAILED, and returns the FINISHED run if there is one
   (unless ``force``, its real data changed since: :func:`~bench.cell.once.data_changed`, or its
   result cannot be verified: edited, or its tags gone, which it says in one line);
4. it creates the run RUNNING, computes the cell, logs it and marks it FINISHED; a failure
   marks it FAILED (KILLED on an interrupt); a forced re-run, or one on changed data, supersedes
   the earlier run.

Two processes that reach one cell of one store at once therefore compute it once, whatever
their cache folders: the second waits for the lock and then finds the first one's FINISHED run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
import traceback
from typing import TYPE_CHECKING, Any, Callable

from bench.cell import attacks, data, release, result, task, tracking
from bench.cell.once import _orphaned, cell_locks, data_changed
from bench.cell.outcome import CellOutcome, cell_label
from bench.cell.plan import Plan, run_context
from bench.cell.result import CellOutput
from bench.core import curves
from bench.data.base import recording_reads
from bench.errors import BenchError
from bench.storage.locks import file_lock
from bench.storage.tracking.lookup import tagless_runs
from bench.storage.tracking.verify import UnverifiedResult
from bench.system import precision
from bench.system.cpus import fit_torch_threads
from bench.system.memory import release_free_memory, tune_allocator
from bench.system.progress import StageClock

if TYPE_CHECKING:
    from bench.storage.tracking import Tracker


def execute(
    planned: Plan,
    tracker: "Tracker",
    force: bool = False,
    log: Callable[[str], None] = lambda message: None,
    progress: Callable[..., Any] | None = None,
) -> CellOutcome:
    """Computes and logs one planned cell unless it is already FINISHED (on the same data).

    Args:
        planned: A plan from :func:`bench.cell.plan.plan`.
        tracker: The opened (probed) tracking store.
        force: Compute again even when a FINISHED run exists; the earlier run is then
            tagged superseded, so one run counts.
        log: Progress lines.
        progress: Progress-bar wrapper for long loops.

    Returns:
        ``skipped`` with the existing run and its result, or ``done`` with the new run.

    Raises:
        Whatever the computation raised, after its run was marked FAILED (or KILLED).
    """
    from bench.cell.outcome import CellOutcome
    from bench.cell.run import run_cell

    tune_allocator()  # glibc's heap keeps freed blocks while cells run (once per process; bench/system/memory.py)
    started = time.perf_counter()
    cfg = planned.config
    key, label = planned.key, cell_label(cfg)
    locks = cell_locks(tracker, cfg.cache, key)
    lock = locks[0]
    with contextlib.ExitStack() as held:
        for path in locks:
            held.enter_context(file_lock(path))
        orphans = tracker.fail_orphans(key, lambda run: _orphaned(run, lock))
        if orphans:
            log(f"marked {orphans} run(s) of this cell left by a killed process FAILED")
        # A FINISHED run whose tags are gone is not found by its key: found by its params, it says why it is redone.
        existing = tracker.finished_runs(key) or tagless_runs(
            tracker, {"task": cfg.task, "mechanism": cfg.mechanism, "seed": cfg.seed, "profile": cfg.profile}, key)
        if existing and not force:
            try:
                result = tracker.load_result(existing[0])
                changed = data_changed(planned, result)
            except UnverifiedResult as exc:
                changed = exc.reason
            if changed is None:
                return CellOutcome(key, label, "skipped", existing[0], time.perf_counter() - started, result=result)
            print(f"bench: warning: {label}: {changed}; computing the cell again (run {existing[0]} is "
                  "superseded)", file=sys.stderr, flush=True)
        identity = {"task": cfg.task, "mechanism": cfg.mechanism, "params": dict(planned.mechanism.config),
                    "seed": cfg.seed, "profile": cfg.profile, "precision": cfg.precision}
        run_id = tracker.start_cell(key, identity, lock)
        try:
            fit_torch_threads()  # no more intra-op threads than CPUs this process may use
            output = run_cell(planned, log, progress)
            tracking.log_cell(tracker, run_id, output, planned)
        except KeyboardInterrupt:
            tracker.fail_cell(run_id, "interrupted", status="KILLED")
            raise
        except BaseException as exc:
            tracker.fail_cell(run_id, one_line(exc), traceback.format_exc())
            raise
        finally:
            release_free_memory()  # the heap keeps what a cell freed (bench/system/memory.py) until here
        if existing:
            tracker.supersede(existing, run_id)
    return CellOutcome(key, label, "done", run_id, time.perf_counter() - started, result=output.result)


def run_cell(planned: Plan, log: Callable[[str], None] = lambda msg: None, progress: Callable[..., Any] | None = None) -> CellOutput:
    """Computes one cell. Writes only to the cache; tracking is :func:`bench.cell.tracking.log_cell`'s job.

    Its result records every dataset the cell read (``data_reads``: its own, a transfer
    target, the public set a mechanism fitted on) with its fingerprint.

    Args:
        planned: A validated plan from :func:`bench.cell.plan.plan`.
        log: Progress messages.
        progress: Progress-bar wrapper for long loops.

    Raises:
        BenchError: Missing or malformed data.
    """
    with recording_reads(planned.config.verify_data) as reads, precision.reproducible():
        output = _steps(planned, log, progress)
    return dataclasses.replace(output, result=dataclasses.replace(output.result, data_reads=reads))


def _steps(planned: Plan, log: Callable[[str], None], progress: Callable[..., Any] | None) -> CellOutput:
    """data -> release -> task -> attacks -> result, each step once, timed by stage."""
    started = time.perf_counter()
    ctx = run_context(planned, log, progress)
    clock = StageClock()
    with clock("data"):
        clean, chain = data.load(planned, log)
    with clock("release"):
        released = release.release(planned, clean, ctx, log)
    with curves.recording() as recorded:
        with clock("task"):
            utility = task.evaluate(planned, clean, released, ctx, log)
        outcomes, skipped = attacks.run(planned, clean, released, ctx, clock, log)
    cell = result.build(planned, ctx, clean, released, chain, utility, outcomes, skipped, clock, started)
    return CellOutput(cell, clean, released, recorded, ctx.tables)


def one_line(exc: BaseException) -> str:
    """Returns an error as one line: a BenchError's message, else ``Type: message``."""
    text = " ".join(str(exc).split())
    return text if isinstance(exc, BenchError) else f"{type(exc).__name__}: {text}"


def stderr_log(message: str) -> None:
    """Prints a progress line on stderr."""
    print(f"[bench] {message}", file=sys.stderr, flush=True)
