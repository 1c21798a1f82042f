"""What a result records about the code and machine behind it: package versions, threads, commit."""

from __future__ import annotations

import os
import platform
import subprocess
from functools import lru_cache
from importlib import metadata
from pathlib import Path

import torch

from bench.core.version import __version__


@lru_cache(maxsize=1)
def versions() -> dict[str, str]:
    """Returns the versions of Python, PrivBench and the packages that change numbers."""
    out = {"python": platform.python_version(), "privbench": __version__}
    for package in ("torch", "torchvision", "numpy", "scikit-learn", "facenet-pytorch", "mlflow"):
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            out[package] = "absent"
    return out


def hardware(device: torch.device) -> dict[str, str]:
    """Returns ``{"cpu_threads": N, "cpu": model, "cpu_capability": ISA}`` for a CPU cell, ``{"gpu": name}`` for CUDA.

    torch's intra-op threads split float sums, so a cell computed on 1 thread (a grid
    worker's share of 2 cores) and on 2 differs slightly; so does one computed on another
    CPU model, whose kernels round differently (AVX-512 against AVX2: ``cpu_capability`` is
    the instruction set torch's kernels use, ``torch.backends.cpu.get_cpu_capability()``), or
    on another GPU.
    """
    if device.type == "cpu":
        return {"cpu_threads": str(torch.get_num_threads()), "cpu": cpu_model(),
                "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    if device.type == "cuda":
        return {"gpu": torch.cuda.get_device_name(device)}
    return {}


@lru_cache(maxsize=1)
def cpu_model() -> str:
    """Returns the CPU's model name (``/proc/cpuinfo``, else ``platform.processor()``), or ``unknown``."""
    info = Path("/proc/cpuinfo")
    lines = info.read_text(errors="replace").splitlines() if info.is_file() else []
    name = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "")
    return name or platform.processor() or "unknown"


@lru_cache(maxsize=1)
def git_sha() -> str:
    """Returns the harness's commit (with ``-dirty`` for uncommitted changes), or ``unknown``.

    Code shipped to a Ray worker is no git checkout: the driver's commit comes in ``BENCH_GIT_SHA``.
    """
    if os.environ.get("BENCH_GIT_SHA"):
        return os.environ["BENCH_GIT_SHA"]
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if sha.returncode != 0:
            return "unknown"
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
        return sha.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
