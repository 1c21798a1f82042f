"""Orphaned runs: a RUNNING run counts as orphaned exactly when its process is gone."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from bench.cell.once import sweep_orphans
from bench.storage.tracking import Tracker


def dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(proc.stdout)


def running(tracker: Tracker, **tags: str) -> str:
    run = tracker.client.create_run(tracker.experiment_id, tags={"bench.cell_key": "k", **tags})
    return run.info.run_id


def test_runs_of_dead_processes_are_failed_and_live_ones_kept(tmp_path):
    import socket

    tracker = Tracker(tmp_path / "results")
    host = socket.gethostname()
    lock = tmp_path / "held.lock"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, sys, time\n"
        f"f = open({str(lock)!r}, 'a'); fcntl.flock(f, fcntl.LOCK_EX)\n"
        "print('held', flush=True); time.sleep(60)\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        free = tmp_path / "free.lock"
        free.touch()
        dead = running(tracker, **{"bench.host": host, "bench.pid": str(dead_pid())})
        mine = running(tracker, **{"bench.host": host, "bench.pid": str(os.getpid())})
        elsewhere_free = running(tracker, **{"bench.host": "other-node", "bench.pid": "1", "bench.lock": str(free)})
        elsewhere_held = running(tracker, **{"bench.host": "other-node", "bench.pid": "1", "bench.lock": str(lock)})
        not_a_cell = tracker.client.create_run(tracker.experiment_id).info.run_id
        assert sweep_orphans(tracker) == 2
        status = {r: tracker.client.get_run(r).info.status for r in (dead, mine, elsewhere_free, elsewhere_held, not_a_cell)}
        assert status == {dead: "FAILED", mine: "RUNNING", elsewhere_free: "FAILED", elsewhere_held: "RUNNING",
                          not_a_cell: "RUNNING"}
        assert "orphaned" in tracker.client.get_run(dead).data.tags["bench.error"]
    finally:
        holder.kill()
        holder.wait()
    time.sleep(0.1)
    assert sweep_orphans(tracker) == 1  # the holder is gone: its lock is free now
