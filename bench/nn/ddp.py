"""Data-parallel training across the devices of one node with ``torch.distributed``.

:func:`run_data_parallel` spawns one process per device (``nccl`` on GPUs, ``gloo`` on
CPU processes), joins them in a process group through a rendezvous file, runs a training
function in each and returns what rank 0 returns. The training function itself is the
one-process code: :func:`bench.nn.stream_train.train_streamed` sees the process group,
wraps the model in ``DistributedDataParallel`` and reads its share of every batch.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import torch

from bench.system import precision
from bench.system.cpus import usable_cpus

BACKENDS = ("auto", "gloo", "nccl")


def world_size(processes: int | None, device: torch.device) -> int:
    """Returns how many processes a training uses: ``processes``, or every visible GPU (1 on CPU) when None."""
    if processes is not None:
        return int(processes)
    return max(1, torch.cuda.device_count()) if device.type == "cuda" else 1


def run_data_parallel(processes: int, device: torch.device, fn: Callable[..., Any], *args: Any,
                      backend: str = "auto") -> Any:
    """Runs ``fn(device_of_rank, *args)`` in ``processes`` processes of one process group; returns rank 0's result.

    Every rank computes at the precision in force here (:func:`bench.system.precision.current`),
    with TF32 off as in the parent: a spawned process starts with torch's defaults.

    Args:
        processes: Processes (ranks); on CUDA, rank ``r`` uses ``cuda:r``.
        device: The run's device (its type picks the devices of the ranks).
        fn: A module-level function (it is pickled into the spawned processes).
        *args: Its arguments (picklable: tensors, ``ShardedImages``, dataclasses).
        backend: ``gloo``, ``nccl``, or ``auto`` (nccl on CUDA, gloo on CPU).

    Returns:
        What ``fn`` returned in rank 0.
    """
    if backend == "auto":
        backend = "nccl" if device.type == "cuda" else "gloo"
    with tempfile.TemporaryDirectory(prefix="bench-ddp-") as tmp:
        folder = Path(tmp)
        arguments = (processes, device.type, backend, folder, fn, args, precision.current())
        torch.multiprocessing.spawn(_worker, args=arguments, nprocs=processes, join=True)
        return torch.load(folder / "result.pt", map_location="cpu", weights_only=False)


def _worker(rank: int, world: int, device_type: str, backend: str, folder: Path, fn: Callable[..., Any],
            args: tuple[Any, ...], arithmetic: str) -> None:
    share = max(1, usable_cpus() // world)
    os.environ.setdefault("OMP_NUM_THREADS", str(share))
    torch.set_num_threads(share)
    device = torch.device(f"cuda:{rank}") if device_type == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch.distributed.init_process_group(backend, init_method=(folder / "rendezvous").as_uri(), rank=rank,
                                         world_size=world)
    try:
        with precision.reproducible(), precision.using(arithmetic):  # a spawned rank starts with torch's defaults
            result = fn(device, *args)
        if rank == 0:
            torch.save(result, folder / "result.tmp")
            os.replace(folder / "result.tmp", folder / "result.pt")
        torch.distributed.barrier()
    finally:
        torch.distributed.destroy_process_group()
    # A gloo worker's interpreter exit aborted about 1 time in 20 under load ("terminate called
    # without an active exception", from C++ destructors of transport threads): with the group
    # destroyed and the result written, the worker leaves without running them.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
