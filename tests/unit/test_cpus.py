"""bench.system.cpus counts the CPUs a process may use: affinity mask and cgroup quotas (v1 and v2)."""

from __future__ import annotations

import os

import pytest

from bench.system import cpus
from bench.system.cpus import cgroup_cpu_limit, usable_cpus


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cgroup_v2_quota_is_rounded_up(tmp_path):
    proc = tmp_path / "proc_cgroup"
    _write(proc, "0::/kubepods/pod1/box\n")
    _write(tmp_path / "fs" / "kubepods" / "pod1" / "box" / "cpu.max", "250000 100000\n")
    assert cgroup_cpu_limit(tmp_path / "fs", proc) == 3


def test_cgroup_v2_tightest_ancestor_counts_and_max_is_no_limit(tmp_path):
    proc = tmp_path / "proc_cgroup"
    _write(proc, "0::/outer/inner\n")
    _write(tmp_path / "fs" / "outer" / "inner" / "cpu.max", "max 100000\n")
    _write(tmp_path / "fs" / "outer" / "cpu.max", "150000 100000\n")
    _write(tmp_path / "fs" / "cpu.max", "max 100000\n")
    assert cgroup_cpu_limit(tmp_path / "fs", proc) == 2
    (tmp_path / "fs" / "outer" / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_limit(tmp_path / "fs", proc) is None


def test_cgroup_v1_quota_and_unlimited(tmp_path):
    proc = tmp_path / "proc_cgroup"
    _write(proc, "4:memory:/x\n3:cpu,cpuacct:/docker/abc\n")
    folder = tmp_path / "fs" / "cpu,cpuacct" / "docker" / "abc"
    _write(folder / "cpu.cfs_quota_us", "50000\n")
    _write(folder / "cpu.cfs_period_us", "100000\n")
    assert cgroup_cpu_limit(tmp_path / "fs", proc) == 1
    (folder / "cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_cpu_limit(tmp_path / "fs", proc) is None


def test_cgroup_v1_container_sees_its_own_cgroup_at_the_mount_root(tmp_path):
    """Inside a container the listed path (the host's) does not exist; the mount's root is its cgroup."""
    proc = tmp_path / "proc_cgroup"
    _write(proc, "1:cpu:/docker/0123abcd\n")
    _write(tmp_path / "fs" / "cpu" / "cpu.cfs_quota_us", "400000\n")
    _write(tmp_path / "fs" / "cpu" / "cpu.cfs_period_us", "100000\n")
    assert cgroup_cpu_limit(tmp_path / "fs", proc) == 4


def test_no_cgroup_information_is_no_limit(tmp_path):
    assert cgroup_cpu_limit(tmp_path / "fs", tmp_path / "missing") is None
    _write(tmp_path / "garbled", "0::/\n")
    _write(tmp_path / "fs" / "cpu.max", "lots\n")
    assert cgroup_cpu_limit(tmp_path / "fs", tmp_path / "garbled") is None


def test_usable_cpus_is_the_smaller_of_affinity_and_quota(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5}, raising=False)
    proc = tmp_path / "proc_cgroup"
    _write(proc, "0::/\n")
    _write(tmp_path / "fs" / "cpu.max", "200000 100000\n")
    assert usable_cpus(tmp_path / "fs", proc) == 2
    (tmp_path / "fs" / "cpu.max").write_text("max 100000\n")
    assert usable_cpus(tmp_path / "fs", proc) == 6
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3}, raising=False)
    (tmp_path / "fs" / "cpu.max").write_text("800000 100000\n")
    assert usable_cpus(tmp_path / "fs", proc) == 1


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no affinity API on this platform")
def test_this_process_counts_at_most_its_affinity():
    assert 1 <= cpus.usable_cpus() <= len(os.sched_getaffinity(0))


def test_fit_torch_threads_lowers_to_the_quota_and_never_raises(monkeypatch):
    import torch

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        monkeypatch.setattr(cpus, "usable_cpus", lambda: 1)
        assert cpus.fit_torch_threads() == 1 and torch.get_num_threads() == 1
        monkeypatch.setattr(cpus, "usable_cpus", lambda: 8)
        assert cpus.fit_torch_threads() == 1 and torch.get_num_threads() == 1  # a worker's share is kept
    finally:
        torch.set_num_threads(before)


def test_grid_cpu_slots_split_the_usable_cpus_not_the_hosts(monkeypatch):
    from bench.scale import executors

    monkeypatch.setattr(executors, "usable_cpus", lambda: 4)
    assert [slot.threads for slot in executors.slots("cpu", 2)] == [2, 2]
    assert executors.default_cpu_workers() == 4
    monkeypatch.setattr(executors, "usable_cpus", lambda: 1)
    assert [slot.threads for slot in executors.slots("cpu", None)] == [1]
