"""Where large CPU tensors live: on huge pages, in a heap that keeps freed memory for reuse.

Both settings change where memory lies, never a value. Importing bench sets neither:
:func:`tune_allocator` runs when the ``bench`` command starts (before torch is imported, so
huge pages apply; spawned grid workers inherit the variable) and when a cell runs
(:func:`bench.cell.run.execute`: glibc's settings and the watcher, in any process). A script
or notebook opts in to huge pages too by calling ``bench.tune_allocator()`` before it
imports torch.

* ``THP_MEM_ALLOC_ENABLE=1``: PyTorch puts CPU tensors of 2 MB and more on transparent
  huge pages, 2 MB-aligned. A fresh 2 MB page faults once where 512 small pages fault
  each, and a freed block is reused whole by the next tensor of its size (with 64-byte
  alignment glibc's heap could not fit the same size back into it). ``THP_MEM_ALLOC_ENABLE=0``
  turns it off.
* glibc's heap as a caching allocator, as PyTorch's own is on CUDA: no block gets a
  mapping of its own (``M_MMAP_MAX=0``) and free memory is not handed back on each free
  (``M_TRIM_THRESHOLD=-1``). Before, every block of 32 MB or more (a Conv-4 activation of a
  200-image episode is 52 MB, a 100,000-image batch 2.5 GB) was a fresh mapping that the
  kernel zeroed and faulted in again on every call: the main job spent 29 s in the kernel
  (5 s now), and a mechanism's cost per value grew up to 2x from 1,000 to 100,000 images.
  The free memory kept is bounded: a watcher thread hands it back (``malloc_trim``) once
  the resident memory that is not in use exceeds :func:`free_limit` (an eighth of the
  memory: 3 GiB on 24 GiB; :func:`watch_step`), and the cell runner
  hands it all back after each cell (:func:`release_free_memory`), so a grid worker holds
  no more than its largest cell. A glibc older than 2.33 (no ``mallinfo2`` to watch with)
  only gets its mmap threshold raised to its largest, 32 MB (trim threshold 64 MB), so that
  blocks below that are reused. Where the user set ``MALLOC_MMAP_MAX_``,
  ``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_`` or malloc ``GLIBC_TUNABLES``,
  glibc is left as it is.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import threading
import time
from pathlib import Path

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_MMAP_MAX = -1, -3, -4
NEVER_TRIM = -1
"""glibc's M_TRIM_THRESHOLD for "never hand the heap's top back on free" (mallopt(3))."""
OLD_GLIBC_THRESHOLDS = {_M_MMAP_THRESHOLD: 32 << 20, _M_TRIM_THRESHOLD: 64 << 20}
"""Without ``mallinfo2``: the largest mmap threshold glibc allows on 64-bit, and its 2x trim rule."""
USER_SETTINGS = ("MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
WATCH_SECONDS = 1.0
"""How often the watcher compares the memory kept (:func:`kept_bytes`) with :func:`free_limit`."""
_watcher_pid: int | None = None


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def user_tuned_malloc(environ: dict[str, str] | os._Environ = os.environ) -> bool:
    """Whether the environment already sets glibc's malloc thresholds."""
    return any(name in environ for name in USER_SETTINGS) or "glibc.malloc." in environ.get("GLIBC_TUNABLES", "")


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """Returns this process's C library where it is glibc (musl's mallopt does nothing), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version, libc.malloc_trim
    except (OSError, AttributeError):
        return None
    if hasattr(libc, "mallinfo2"):  # glibc 2.33+
        libc.mallinfo2.restype = _Mallinfo2
    return libc


def tune_allocator() -> bool:
    """Turns on PyTorch's huge pages (unless set) and makes glibc's heap keep freed memory (unless tuned).

    Returns:
        Whether glibc's settings were changed (False off glibc, or where the user set them).
    """
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
    libc = _glibc()
    if libc is None or user_tuned_malloc():
        return False
    if not hasattr(libc, "mallinfo2"):
        return all(libc.mallopt(param, value) for param, value in OLD_GLIBC_THRESHOLDS.items())
    if not (libc.mallopt(_M_MMAP_MAX, 0) and libc.mallopt(_M_TRIM_THRESHOLD, NEVER_TRIM)):
        return False
    if _watcher_pid is None:
        os.register_at_fork(after_in_child=_watch)  # a forked DataLoader worker gets a watcher of its own
    _watch()
    return True


def heap_in_use() -> int:
    """Returns the bytes glibc counts as in use over all its arenas, blocks mapped on their own included.

    0 without glibc 2.33 or later (no ``mallinfo2``).
    """
    libc = _glibc()
    if libc is None or not hasattr(libc, "mallinfo2"):
        return 0
    info = libc.mallinfo2()
    return info.uordblks + info.hblkhd


def kept_bytes() -> int:
    """Returns this process's resident private memory that glibc does not count as in use.

    That is the heap's resident free memory, plus what never came from malloc (Python's
    object arenas, thread stacks). Read from ``/proc/self/statm``; 0 where it is missing.
    """
    try:
        fields = Path("/proc/self/statm").read_text().split()
    except OSError:
        return 0
    resident_private = (int(fields[1]) - int(fields[2])) * os.sysconf("SC_PAGE_SIZE")
    return max(0, resident_private - heap_in_use())


def release_free_memory() -> bool:
    """Hands the heap's free memory back to the system (``malloc_trim(0)``); live memory is untouched.

    Returns:
        Whether any memory was handed back (False off glibc).
    """
    libc = _glibc()
    return bool(libc.malloc_trim(0)) if libc is not None else False


@functools.cache
def free_limit(cgroup_root: Path = Path("/sys/fs/cgroup")) -> int:
    """Returns the most free memory the heap keeps: an eighth of this machine's (or its cgroup's) memory."""
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    for name in ("memory.max", "memory/memory.limit_in_bytes"):  # cgroup v2, v1
        try:
            total = min(total, int((cgroup_root / name).read_text().strip()))
        except (OSError, ValueError):  # absent, or "max"
            pass
    return total // 8


def watch_step(limit: int, floor: int) -> int:
    """Hands free memory back when the memory kept exceeds ``floor + limit``; returns the new floor.

    The floor is what was kept right after the last release: memory that releasing cannot
    hand back (Python's arenas, stacks). Without it a process whose own arenas exceed the
    limit would trim every time.
    """
    if kept_bytes() <= floor + limit:
        return floor
    release_free_memory()
    return kept_bytes()


def _watch() -> None:
    """Starts, once per process, the thread that keeps the heap's resident free memory under :func:`free_limit`."""
    global _watcher_pid
    if _watcher_pid == os.getpid():
        return
    _watcher_pid = os.getpid()

    def loop() -> None:
        limit, floor = free_limit(), 0
        while True:
            time.sleep(WATCH_SECONDS)
            floor = watch_step(limit, floor)

    threading.Thread(target=loop, name="bench-heap-watch", daemon=True).start()
