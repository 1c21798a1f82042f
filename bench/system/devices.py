"""The device a cell computes on: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``, checked against this machine."""

from __future__ import annotations

import torch

from bench.errors import BenchError


def resolve_device(name: str) -> torch.device:
    """Returns the device for ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.

    Raises:
        BenchError: CUDA was asked for and is not available, or the name is unknown.
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise BenchError(f"--device {name}: CUDA is not available on this machine (use --device cpu or auto)")
        return torch.device(name)
    raise BenchError(f"unknown device {name!r} (use auto, cpu, cuda or cuda:N)")
