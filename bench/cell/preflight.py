"""A plugin mechanism's conformance, checked once per process before its cells run (built-ins pass unchecked)."""

from __future__ import annotations

import json
import sys
import threading

import torch

from bench.core.interfaces import Mechanism
from bench.errors import BenchError
from bench.release.guard import is_builtin

_checked: set[tuple[type, str, str]] = set()
_checked_lock = threading.Lock()


def preflight(name: str, mechanism: Mechanism, device: torch.device | str) -> None:
    """Runs the cheap conformance checks on a plugin mechanism before its cells (built-ins pass unchecked).

    Once per process per (class, parameters, device): shape, device, dtype, no change to
    its inputs, determinism and batch independence on small batches, and a well-formed
    claim (:data:`bench.testing.mechanisms.PREFLIGHT`). A check the mechanism crashes
    in cannot judge it and is left to the cell, whose failure is recorded as any other.

    Raises:
        BenchError: A check failed (one line: the mechanism, where it comes from, the first failure).
    """
    cls = type(mechanism)
    if is_builtin(cls):
        return
    key = (cls, json.dumps(mechanism.config, sort_keys=True, default=str), str(device))
    with _checked_lock:
        if key in _checked:
            return
    from bench.testing import mechanisms as suite  # only for plugins: the suites import scipy.stats

    failures, crashed = suite.run_preflight(name, mechanism.config, device)
    where = getattr(sys.modules.get(cls.__module__), "__file__", None) or cls.__module__
    if failures:
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        raise BenchError(f"plugin mechanism {name!r} ({where}) fails a conformance check run before its cells: "
                         f"{_short(failures[0], name)}{more}; nothing was run")
    if crashed:
        print(f"bench: warning: plugin mechanism {name!r} ({where}) raised in conformance check {_short(crashed, name)}; "
              "its cells run with private copies of their inputs", file=sys.stderr, flush=True)
    with _checked_lock:
        _checked.add(key)


def _short(line: str, name: str) -> str:
    """One line of a check's message, without the ``NAME: `` that the checks put before it."""
    return " ".join(line.replace(f": {name}: ", ": ", 1).split())
