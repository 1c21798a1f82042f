"""Temporarily limiting torch's intra-op CPU threads."""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch


@contextlib.contextmanager
def cpu_threads(count: int | None) -> Iterator[None]:
    """Runs the block with ``count`` intra-op threads, restoring the previous number after.

    On a CPU shared with other heavy jobs, one thread per process avoids the barrier
    waits that make multi-threaded convolutions many times slower; None leaves torch's
    setting alone.

    Args:
        count: Threads for the block, or None.
    """
    if count is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(max(1, int(count)))
    try:
        yield
    finally:
        torch.set_num_threads(before)
