"""benchmarks/busy_machine.py measures the few-shot training step in a fresh process; no timing is asserted."""

from __future__ import annotations

import math

import pytest


@pytest.mark.slow  # two fresh processes timing a workload, 16-20 s: the benchmark script's own check
def test_workload_runs_in_a_fresh_process_under_each_wait_policy(benchmark_script):
    busy_machine = benchmark_script("busy_machine")
    for policy in (None, "PASSIVE"):
        seconds = busy_machine.measure(threads=1, episodes=1, repeats=1, policy=policy)
        assert math.isfinite(seconds) and seconds > 0
