"""benchmarks/busy_machine.py measures the few-shot training step in a fresh process; no timing is asserted."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _load():
    # benchmarks/ is no package (opacus installs one named ``benchmarks``): load the script by path.
    spec = importlib.util.spec_from_file_location("_privbench_busy_machine", ROOT / "benchmarks" / "busy_machine.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_workload_runs_in_a_fresh_process_under_each_wait_policy():
    busy_machine = _load()
    for policy in (None, "PASSIVE"):
        seconds = busy_machine.measure(threads=1, episodes=1, repeats=1, policy=policy)
        assert math.isfinite(seconds) and seconds > 0
