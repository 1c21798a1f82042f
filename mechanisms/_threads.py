"""One pool of threads per process for the CPU mechanisms' image-by-image work.

Pillow's blur and numpy's copies release the GIL, so Python threads run them side by
side. Starting a pool of two threads for each call cost about 0.7 ms on 2 cores, which a
small batch notices (a face overlay of 300 images of 224x224 takes about 2 ms), so the
pool is kept between calls. It has exactly torch's thread count (or the count asked for) of threads: more
would run more pieces at once than the caller gave cores to. A child process made by
fork starts without it, and a task that itself runs tasks runs them in its own thread.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait

import torch

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pool_threads = 0
_inside = threading.local()


def _forget_pool() -> None:
    global _pool, _pool_threads
    _pool, _pool_threads = None, 0


os.register_at_fork(after_in_child=_forget_pool)


def _submit(tasks: Sequence[Callable[[], None]], threads: int) -> list[Future]:
    """Queues the tasks on the pool of ``threads`` threads (made anew when the count changed)."""
    global _pool, _pool_threads
    with _lock:  # no other caller shuts the pool down between these submissions
        if _pool_threads != threads:
            if _pool is not None:
                _pool.shutdown(wait=False)  # work already queued on it still runs
            _pool = ThreadPoolExecutor(threads, thread_name_prefix="bench-mechanism",
                                       initializer=_mark_worker)
            _pool_threads = threads
        return [_pool.submit(task) for task in tasks]


def _mark_worker() -> None:
    _inside.worker = True


def run_tasks(tasks: Sequence[Callable[[], None]], threads: int | None = None) -> None:
    """Runs every task, on up to ``threads`` threads (default: torch's thread count).

    Returns once all have finished, raising the exception of the first task (in order)
    that raised one.
    Runs them in this thread when one thread is enough or when called from a task.
    """
    wanted = max(1, torch.get_num_threads() if threads is None else threads)
    if min(wanted, len(tasks)) <= 1 or getattr(_inside, "worker", False):
        for task in tasks:
            task()
        return
    _finish(_submit(tasks, wanted))


def _finish(futures: list[Future]) -> None:
    """Waits for every future, so none still writes once an error is raised, then raises the first error (in order)."""
    wait(futures)
    for future in futures:
        future.result()


def run_beside(main: Callable[[], None], helpers: Sequence[Callable[[], None]]) -> None:
    """Runs ``main`` in this thread while the pool (torch's thread count) runs ``helpers``.

    For work that this thread joins once it has prepared something, as the helpers start
    on what needs no preparing. Returns once all have finished (so none still writes),
    raising ``main``'s exception if it raised one, else that of the first helper (in
    order) that did. Helpers run in this thread, after ``main``, when called from a task.
    """
    if not helpers or getattr(_inside, "worker", False):
        main()
        for task in helpers:
            task()
        return
    futures = _submit(helpers, max(1, torch.get_num_threads()))
    try:
        main()
    except BaseException:
        wait(futures)  # none still writes once main's error is raised
        raise
    _finish(futures)
