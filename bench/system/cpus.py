"""How many CPUs this process may use: its affinity mask, capped by a cgroup CPU quota.

``os.cpu_count()`` counts the host's CPUs. A SLURM job or ``taskset`` narrows the affinity
mask, and a container started with ``--cpus`` (Kubernetes CPU limits, ``docker --cpus``)
gets a cgroup quota of CPU time, which no thread count reflects. Threads beyond either
limit wait at every op's barrier for a CPU they cannot get. So a grid splits these CPUs
between its workers, and a lone cell never runs more intra-op threads than there are.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

__all__ = ["cgroup_cpu_limit", "fit_torch_threads", "usable_cpus"]


def usable_cpus(cgroup_root: Path = Path("/sys/fs/cgroup"), proc_cgroup: Path = Path("/proc/self/cgroup")) -> int:
    """Returns the CPUs this process may use (at least 1).

    Args:
        cgroup_root: Where the cgroup file systems are mounted.
        proc_cgroup: This process's cgroup membership file.
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity API (macOS, Windows)
        cpus = os.cpu_count() or 1
    limit = cgroup_cpu_limit(cgroup_root, proc_cgroup)
    return max(1, min(cpus, limit) if limit is not None else cpus)


def fit_torch_threads() -> int:
    """Lowers torch's intra-op threads to :func:`usable_cpus` (never raises them); returns the count.

    torch starts with one thread per CPU of the affinity mask but knows nothing of a cgroup
    quota. A grid worker's smaller share is kept.
    """
    import torch

    current = torch.get_num_threads()
    threads = min(current, usable_cpus())
    if threads != current:
        torch.set_num_threads(threads)
    return threads


def cgroup_cpu_limit(cgroup_root: Path = Path("/sys/fs/cgroup"),
                     proc_cgroup: Path = Path("/proc/self/cgroup")) -> int | None:
    """Returns the CPU quota of this process's cgroup and its ancestors, rounded up; None if unlimited.

    Reads cgroup v2 (``cpu.max``: ``QUOTA PERIOD`` or ``max PERIOD``) and v1
    (``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``; a quota of -1 is none). The tightest
    quota on the path from the process's cgroup to the root counts.
    """
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    limits = []
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and not controllers:
            limits += [_v2_limit(folder) for folder in _up_from(cgroup_root, path)]
        elif "cpu" in controllers.split(","):
            mount = cgroup_root / controllers
            if not mount.is_dir():
                mount = cgroup_root / "cpu"
            limits += [_v1_limit(folder) for folder in _up_from(mount, path)]
    found = [limit for limit in limits if limit is not None]
    return min(found) if found else None


def _up_from(mount: Path, path: str) -> list[Path]:
    """Returns the cgroup folder of ``path`` under ``mount`` and every ancestor up to ``mount``."""
    parts = [part for part in path.strip("/").split("/") if part]
    return [mount.joinpath(*parts[:depth]) for depth in range(len(parts), -1, -1)]


def _v2_limit(folder: Path) -> int | None:
    try:
        quota, period = (folder / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return None
    return None if quota == "max" else _cpus(quota, period)


def _v1_limit(folder: Path) -> int | None:
    try:
        quota = (folder / "cpu.cfs_quota_us").read_text().strip()
        period = (folder / "cpu.cfs_period_us").read_text().strip()
    except OSError:
        return None
    return None if quota.startswith("-") else _cpus(quota, period)


def _cpus(quota: str, period: str) -> int | None:
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    return max(1, math.ceil(q / p)) if q > 0 and p > 0 else None
