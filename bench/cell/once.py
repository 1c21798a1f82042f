"""A cell computed once per store: the locks a process holds while it computes one, its orphaned runs, and its changed data."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.cell.data import cell_data
from bench.cell.plan import Plan
from bench.core.registry import datasets
from bench.data.base import image_set_digest, load_dataset, load_public, read_entry
from bench.data.shards import configure_huggingface
from bench.storage.locks import lock_is_free, pid_alive, store_lock_folder

if TYPE_CHECKING:
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


def data_changed(planned: Plan, result: Any) -> str | None:
    """Returns why a FINISHED result no longer describes the cell's data, or None when it still does.

    Synthetic data is a function of its options and generator version, both in the cell key.
    Real data is read from a root whose files can change under one key (photos added to a
    folder, a dataset replaced by another version), so every real dataset the result read
    (its own, a transfer target, a public set: ``Result.data_reads``; only its own in a
    result written before reads were recorded) is loaded as the cell would load it (from
    the decoded cache, keyed by the files' sizes and modification times, or their bytes
    with ``--verify-data``) and its content fingerprint compared with the one recorded.
    """

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
