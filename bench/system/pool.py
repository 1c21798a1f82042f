"""Worker processes that die with their parent, and a pool torn down on any exit of it.

A grid's worker processes (:mod:`bench.scale.executors`) must not outlive the process that
started them: nothing would read their results, and each holds a model and its data.

- Each worker asks the kernel for ``SIGKILL`` when its parent dies (Linux
  ``prctl(PR_SET_PDEATHSIG)``), then checks that its parent is still the process that
  started it (it may have died before the request); elsewhere a daemon thread polls
  ``os.getppid()``. This covers a parent killed with ``kill -9``.
- The parent turns SIGTERM and SIGHUP into an exception while its pool runs
  (:func:`exit_on_signals`), so that it kills the workers (:func:`tear_down`) as it does
  on Ctrl-C or any error, and marks the runs they leave FAILED.

A worker killed in the middle of a cell leaves its MLflow run RUNNING with its pid; when
its parent was killed too, the next run of the cell, or the next grid
(:func:`bench.cell.once.sweep_orphans`), marks it FAILED as the run of a dead process. The
multiprocessing resource tracker reads a pipe whose write ends the parent and its workers
hold: it exits once they are all gone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from typing import Any, Callable, Iterator

PR_SET_PDEATHSIG = 1
"""``prctl`` option: the signal a process gets when its parent (the thread that forked it) ends."""
POLL_SECONDS = 1.0
"""How often a worker without ``PR_SET_PDEATHSIG`` checks that its parent is alive."""
TEARDOWN_SIGNALS = ("SIGTERM", "SIGHUP")
"""Signals whose default action would end the parent without tearing its pool down."""


def die_with_parent(parent_pid: int) -> str:
    """Makes this process end when ``parent_pid``, its parent, ends; ends it now if it already has.

    Args:
        parent_pid: The pid of the process that started this one.

    Returns:
        How: ``pdeathsig`` (the kernel kills this process) or ``watchdog`` (a thread polls).
    """
    how = "pdeathsig" if _set_pdeathsig(signal.SIGKILL) else "watchdog"
    if os.getppid() != parent_pid:  # the parent died before the request: nobody would signal us
        os._exit(1)
    if how == "watchdog":
        threading.Thread(target=_watch_parent, args=(parent_pid,), name="bench-parent-watchdog", daemon=True).start()
    return how


def _set_pdeathsig(signum: int) -> bool:
    """Asks Linux to send ``signum`` to this process when its parent ends; False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(POLL_SECONDS)
    os.kill(os.getpid(), signal.SIGKILL)


class Terminated(SystemExit):
    """The process received a signal that ends it (SIGTERM, SIGHUP); exits with 128 + the signal."""


@contextlib.contextmanager
def exit_on_signals() -> Iterator[None]:
    """Raises :class:`Terminated` in the main thread on SIGTERM or SIGHUP while the block runs.

    The default action of these signals ends the process at once, skipping every
    ``finally``; raising instead lets the block's callers clean up. Outside the main thread
    (where handlers cannot be installed) this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[int, Any] = {}

    def raise_terminated(signum: int, frame: Any) -> None:
        raise Terminated(128 + signum)

    for name in TEARDOWN_SIGNALS:
        signum = getattr(signal, name, None)
        if signum is not None and signal.getsignal(signum) in (signal.SIG_DFL, None):
            previous[signum] = signal.signal(signum, raise_terminated)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def kill_workers(pool: Any, timeout: float = 10.0) -> list[int]:
    """Kills the worker processes of a ``ProcessPoolExecutor`` and shuts it down without waiting.

    Args:
        pool: The executor (its queued cells are cancelled).
        timeout: Seconds to wait for each killed worker to be reaped.

    Returns:
        The pids of the workers that were alive and were killed.
    """
    processes = list((getattr(pool, "_processes", None) or {}).values())
    killed = []
    for process in processes:
        if process.is_alive():
            process.kill()
            killed.append(process.pid)
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.join(timeout)
    return killed


def tear_down(pool: Any, cause: BaseException, sweep: Callable[[], int]) -> None:
    """Kills a pool's workers as its parent ends, then has ``sweep`` mark the runs they left FAILED.

    Args:
        pool: The ``ProcessPoolExecutor``.
        cause: Why the parent ends (a signal, Ctrl-C, an error).
        sweep: Marks runs whose process is gone FAILED and returns how many
            (:func:`bench.cell.once.sweep_orphans`).
    """
    killed = kill_workers(pool)
    if not killed:
        return
    try:
        note = f"{sweep()} run(s) they left marked FAILED"
    except Exception as exc:  # the store may be what failed: the next grid or run marks them
        note = f"the next grid or run marks the runs they left FAILED (the store: {type(exc).__name__})"
    why = "terminated by a signal" if isinstance(cause, Terminated) else f"stopped ({type(cause).__name__})"
    print(f"[bench] grid {why}: {len(killed)} worker process(es) killed; {note}", file=sys.stderr, flush=True)
