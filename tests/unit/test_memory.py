"""bench/system/memory.py: huge pages on, glibc's heap keeping freed memory unless the user tuned malloc."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bench.system import memory as _memory

PROBE = r"""
import json, os
import bench
from bench.system import memory as _memory
bench.tune_allocator()  # as the bench command does when it starts (importing bench does not)
print(json.dumps({"thp": os.environ.get("THP_MEM_ALLOC_ENABLE"), "again": _memory.tune_allocator()}))
"""

REUSE = r"""
import json, resource
import bench
bench.tune_allocator()  # as the bench command does, before torch
import torch
from bench.system import memory as _memory

def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

x = torch.full((64 << 20,), 1, dtype=torch.uint8)  # 64 MB: above glibc's largest mmap threshold
del x
least = None
for _ in range(3):  # the fewest faults of three rounds of allocating the same size again
    before = faults()
    y = torch.full((64 << 20,), 2, dtype=torch.uint8)
    least = min(least if least is not None else 1 << 30, faults() - before)
    del y
print(json.dumps({"faults": least, "trimmed": _memory.release_free_memory()}))
"""


def test_the_heap_keeps_at_most_an_eighth_of_the_memory_or_of_the_cgroups(tmp_path):
    physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    (tmp_path / "memory.max").write_text(f"{min(physical, 8 << 30) // 2}\n")  # a cgroup of half of it
    assert _memory.free_limit.__wrapped__(tmp_path) == min(physical, 8 << 30) // 16
    (tmp_path / "memory.max").write_text("max\n")
    assert _memory.free_limit.__wrapped__(tmp_path) == physical // 8


STEP = r"""
import json
import bench
bench.tune_allocator()  # as the bench command does, before torch
import torch
from bench.system import memory as _memory

x = torch.ones(256 << 20, dtype=torch.uint8)  # 256 MB in the heap, then free and still resident
del x
before = _memory.kept_bytes()
floor = _memory.watch_step(64 << 20, 0)  # a 64 MB limit: hand it back
after = _memory.kept_bytes()
again = _memory.watch_step(64 << 20, floor)  # nothing new kept: no second release
print(json.dumps({"before": before, "after": after, "floor": floor, "again": again}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_the_watcher_hands_back_resident_free_memory_once_and_not_again(monkeypatch):
    _clean_env(monkeypatch)
    out = json.loads(subprocess.run([sys.executable, "-c", STEP], capture_output=True, text=True,
                                    check=True).stdout)
    assert out["before"] - out["after"] > 200 << 20, out  # the 256 MB went back to the system
    assert abs(out["floor"] - out["after"]) < 1 << 20 and out["again"] == out["floor"], out


def _clean_env(monkeypatch) -> None:
    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE", raising=False)
    for name in (*_memory.USER_SETTINGS, "GLIBC_TUNABLES"):
        monkeypatch.delenv(name, raising=False)


class _OldGlibc:
    """A glibc without mallinfo2 (before 2.33) that records its mallopt calls."""

    def __init__(self):
        self.calls = []

    def mallopt(self, param, value):
        self.calls.append((param, value))
        return 1


def test_a_glibc_without_mallinfo2_only_gets_the_largest_mmap_threshold(monkeypatch):
    _clean_env(monkeypatch)
    old = _OldGlibc()
    monkeypatch.setattr(_memory, "_glibc", lambda: old)
    assert _memory.tune_allocator() is True
    assert old.calls == [(-3, 32 << 20), (-1, 64 << 20)]  # M_MMAP_THRESHOLD, M_TRIM_THRESHOLD; no watcher
    assert _memory.heap_in_use() == 0


@pytest.mark.parametrize("environ,tuned", [
    ({}, False),
    ({"MALLOC_MMAP_THRESHOLD_": "131072"}, True),
    ({"MALLOC_TRIM_THRESHOLD_": "0"}, True),
    ({"MALLOC_MMAP_MAX_": "65536"}, True),
    ({"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=65536"}, True),
    ({"GLIBC_TUNABLES": "glibc.pthread.rseq=0"}, False),
])
def test_a_users_malloc_settings_are_left_alone(environ, tuned):
    assert _memory.user_tuned_malloc(environ) is tuned


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_tuning_the_allocator_turns_on_huge_pages_and_the_keeping_heap(monkeypatch):
    _clean_env(monkeypatch)
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout
    assert out.strip() == '{"thp": "1", "again": true}'
    monkeypatch.setenv("THP_MEM_ALLOC_ENABLE", "0")
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "131072")
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout
    assert out.strip() == '{"thp": "0", "again": false}'


@pytest.mark.slow  # five fresh processes, 20-25 s: a measurement of the tuning the tests above check
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_a_freed_large_tensor_is_reused_without_page_faults_and_handed_back_on_release(monkeypatch):
    _clean_env(monkeypatch)

    def probe() -> dict:
        return json.loads(subprocess.run([sys.executable, "-c", REUSE], capture_output=True, text=True,
                                         check=True).stdout)

    # A small block that lands right after the freed one keeps it from being reused whole:
    # a 2 MB-aligned allocation needs 2 MB of slack beyond its size. Freed neighbours then
    # merge, but in about one process in six not within three rounds: the best of four.
    kept = [probe() for _ in range(4)]
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", str(32 << 20))  # glibc's own: the 64 MB is mapped afresh
    fresh = probe()
    assert min(k["faults"] for k in kept) < 16 < 32 <= fresh["faults"], (kept, fresh)  # 32 huge pages, or 16,384
    assert all(k["trimmed"] for k in kept)
