"""bench/_memory.py: huge pages on, glibc's thresholds raised unless the user tuned them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench import _memory

PROBE = r"""
import json, os
import bench
from bench import _memory
print(json.dumps({"thp": os.environ.get("THP_MEM_ALLOC_ENABLE"), "again": _memory.tune_allocator()}))
"""


@pytest.mark.parametrize("environ,tuned", [
    ({}, False),
    ({"MALLOC_MMAP_THRESHOLD_": "131072"}, True),
    ({"MALLOC_TRIM_THRESHOLD_": "0"}, True),
    ({"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=65536"}, True),
    ({"GLIBC_TUNABLES": "glibc.pthread.rseq=0"}, False),
])
def test_a_users_malloc_settings_are_left_alone(environ, tuned):
    assert _memory.user_tuned_malloc(environ) is tuned


def test_the_thresholds_are_glibcs_largest_and_its_trim_rule():
    assert _memory.MMAP_THRESHOLD == 32 * 1024 * 1024 and _memory.TRIM_THRESHOLD == 2 * _memory.MMAP_THRESHOLD


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_importing_bench_turns_on_huge_pages_and_sets_the_thresholds(monkeypatch):
    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE", raising=False)
    for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES"):
        monkeypatch.delenv(name, raising=False)
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout
    assert out.strip() == '{"thp": "1", "again": true}'
    monkeypatch.setenv("THP_MEM_ALLOC_ENABLE", "0")
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "131072")
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout
    assert out.strip() == '{"thp": "0", "again": false}'
