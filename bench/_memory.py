"""Where large CPU tensors live: on huge pages, in freed buffers that are reused.

Both settings change where memory lies, never a value, and both act only where bench is
imported before torch allocates (the CLI, grid workers, the benchmarks).

* ``THP_MEM_ALLOC_ENABLE=1``: PyTorch puts CPU tensors of 2 MB and more on transparent
  huge pages. A fresh 2 MB page faults once where 512 small pages fault each, which made a
  mechanism's cost per value grow with the batch. ``THP_MEM_ALLOC_ENABLE=0`` turns it off.
* glibc's thresholds: PyTorch asks for those tensors 2 MB-aligned, which keeps glibc from
  raising its mmap threshold after a free as it otherwise does. Every tensor above 128 KB
  then came from a fresh mapping and paid its page faults again: a 3.7 MB batch of 300
  64x64 images cost 1-2 ms to clone instead of 0.2 ms. The threshold is set to glibc's
  largest (32 MB) and the trim threshold to twice that (glibc's own rule), so buffers
  below 32 MB are reused. A user's ``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``
  or malloc ``GLIBC_TUNABLES`` are left as they are.
"""

from __future__ import annotations

import os
import sys

MMAP_THRESHOLD = 32 << 20
"""Bytes from which glibc maps a block on its own: its largest allowed value on 64-bit."""
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD
"""Free bytes at the heap's top that glibc keeps rather than returns: twice the mmap threshold."""
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def user_tuned_malloc(environ: dict[str, str] | os._Environ = os.environ) -> bool:
    """Whether the environment already sets glibc's malloc thresholds."""
    return ("MALLOC_MMAP_THRESHOLD_" in environ or "MALLOC_TRIM_THRESHOLD_" in environ
            or "glibc.malloc." in environ.get("GLIBC_TUNABLES", ""))


def tune_allocator() -> bool:
    """Turns on PyTorch's huge pages (unless set) and raises glibc's thresholds (unless tuned).

    Returns:
        Whether glibc's thresholds were set (False off glibc, or where the user set them).
    """
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
    if not sys.platform.startswith("linux") or user_tuned_malloc():
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # glibc only: musl's mallopt does nothing
    except (OSError, AttributeError):
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
