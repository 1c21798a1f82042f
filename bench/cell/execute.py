"""One computation per cell: the path every ``bench run``, grid worker, tune trial and Ray task takes.

1. :func:`bench.cell.runner.plan` has validated everything and written nothing;
2. the tracking store was probed when its :class:`~bench.storage.tracking.Tracker` opened;
3. :func:`execute` takes the cell's lock, which lives with the tracking store
   (``<results>/locks/<key>.lock``; :func:`cell_locks`), marks runs of the
   cell whose process died as FAILED, and returns the FINISHED run if there is one
   (unless ``force``, or its real data changed since: :func:`data_changed`);
4. it creates the run RUNNING, computes the cell, logs it and marks it FINISHED; a failure
   marks it FAILED (KILLED on an interrupt); a forced re-run, or one on changed data, supersedes
   the earlier run.

Two processes that reach one cell of one store at once therefore compute it once, whatever
their cache folders: the second waits for the lock and then finds the first one's FINISHED run.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from bench.errors import BenchError
from bench.storage.locks import file_lock, lock_is_free, pid_alive, store_lock_folder

if TYPE_CHECKING:
    from bench.cell.outcome import CellOutcome
    from bench.cell.runner import Plan
    from bench.storage.tracking import Tracker


def cell_locks(tracker: "Tracker", cache_dir: Path, key: str) -> list[Path]:
    """Returns the lock files a process holds, in this order, while it computes one cell into a store.

    The lock belongs to the store the cell is logged to, not to the cache it is computed
    with, so that no choice of ``--cache-dir`` computes one cell twice into one store
    (:func:`bench.storage.locks.store_lock_folder`): for a sqlite store, one lock beside its
    database, which every process that writes the database can take. A store elsewhere (a
    server) has no folder every process sees: its lock is one per machine, and the cell's
    lock in the cache folder, ``<cache>/locks/<key>.lock``, is held first, as before,
    so that nodes sharing a cache still compute a cell once.

    The first lock is the one the run's ``bench.lock`` tag names (:func:`_orphaned`). Runs
    logged before locks lived with the store name ``<cache>/locks/<key>.lock``, a lock
    that is free once their process is gone, as any other.
    """
    store = store_lock_folder(tracker.uri) / f"{key}.lock"
    if tracker.uri.startswith("sqlite:///"):
        return [store]
    return [Path(cache_dir) / "locks" / f"{key}.lock", store]


def execute(
    planned: "Plan",
    tracker: "Tracker",
    force: bool = False,
    log: Callable[[str], None] = lambda message: None,
    progress: Callable[..., Any] | None = None,
) -> "CellOutcome":
    """Computes and logs one planned cell unless it is already FINISHED (on the same data).

    Args:
        planned: A plan from :func:`bench.cell.runner.plan`.
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
    from bench.cell.outcome import CellOutcome, cell_label
    from bench.cell.runner import cell_artifacts, run_cell
    from bench.storage.tracking.verify import UnverifiedResult
    from bench.system.cpus import fit_torch_threads
    from bench.system.memory import release_free_memory, tune_allocator

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
        existing = tracker.finished_runs(key)
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
            configs, artifacts = cell_artifacts(output, planned)
            tracker.finish_cell(run_id, output.result, configs, artifacts, output.curves)
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


def data_changed(planned: "Plan", result: Any) -> str | None:
    """Returns why a FINISHED result no longer describes the cell's data, or None when it still does.

    Synthetic data is a function of its options and generator version, both in the cell key.
    Real data is read from a root whose files can change under one key (photos added to a
    folder, a dataset replaced by another version), so every real dataset the result read
    (its own, a transfer target, a public set: ``Result.data_reads``; only its own in a
    result written before reads were recorded) is loaded as the cell would load it (from
    the decoded cache, keyed by the files' sizes and modification times, or their bytes
    with ``--verify-data``) and its content fingerprint compared with the one recorded.
    """
    from bench.cell.runner import cell_data
    from bench.core.registry import datasets
    from bench.data.base import image_set_digest, load_dataset, load_public, read_entry
    from bench.data.shards import configure_huggingface

    cfg, name = planned.config, planned.task.dataset
    configure_huggingface(cfg.cache)
    own = read_entry(name, "splits", planned.task.data_options(), result.dataset_fingerprint,
                     datasets.get(name).synthetic)
    reads = [own] if result.data_reads is None else result.data_reads
    for read in reads:
        if read["synthetic"]:
            continue
        if read == own:
            now = cell_data(planned).fingerprint
        else:
            load = load_dataset if read["part"] == "splits" else load_public
            loaded = load(read["dataset"], cfg.data_root, read["options"], cfg.cache, cfg.verify_data)
            now = "absent" if loaded is None else (loaded.fingerprint if read["part"] == "splits"
                                                   else image_set_digest(loaded))
        if now != read["fingerprint"]:
            what = f"the {read['dataset']} data" + (" (its public set)" if read["part"] == "public" else "")
            return f"{what} changed since its result (fingerprint {read['fingerprint'][:12]}, now {now[:12]})"
    return None


def one_line(exc: BaseException) -> str:
    """Returns an error as one line: a BenchError's message, else ``Type: message``."""
    text = " ".join(str(exc).split())
    return text if isinstance(exc, BenchError) else f"{type(exc).__name__}: {text}"


def sweep_orphans(tracker: "Tracker") -> int:
    """Marks every RUNNING cell run whose process is gone as FAILED (any cell); returns how many."""
    count = 0
    for run in tracker.client.search_runs([tracker.experiment_id], filter_string="attributes.status = 'RUNNING'"):
        if "bench.cell_key" in run.data.tags and _orphaned(run):
            tracker.fail_cell(run.info.run_id, "orphaned: its process died (killed?) before the cell finished")
            count += 1
    return count


def _orphaned(run: Any, held: Path | None = None) -> bool:
    """Whether a RUNNING run's process is gone (``held``: the lock of its cell, which we hold).

    The run's ``bench.lock`` tag names the lock its process held: this store's lock of the
    cell, or for a run logged before locks lived with the store, a lock in its cache folder
    (free once its process is gone, as any other).
    """
    tags = run.data.tags
    their_lock = tags.get("bench.lock")
    if held is not None and their_lock and their_lock == str(held.resolve()):
        return True  # its process would hold this very lock if it were alive
    if tags.get("bench.host") == socket.gethostname() and tags.get("bench.pid", "").isdigit():
        return int(tags["bench.pid"]) != os.getpid() and not pid_alive(int(tags["bench.pid"]))
    return bool(their_lock) and Path(their_lock).exists() and lock_is_free(Path(their_lock))
