"""benchmarks/busy_machine.py measures the few-shot training step in a fresh process; no timing is asserted."""

from __future__ import annotations

import math


def test_workload_runs_in_a_fresh_process_under_each_wait_policy(benchmark_script):
    busy_machine = benchmark_script("busy_machine")
    for policy in (None, "PASSIVE"):
        seconds = busy_machine.measure(threads=1, episodes=1, repeats=1, policy=policy)
        assert math.isfinite(seconds) and seconds > 0
