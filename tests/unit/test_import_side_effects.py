"""``import bench`` starts nothing and sets nothing; the bench command (and a running cell) tune memory."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = r"""
import json, os, sys, threading
env = dict(os.environ)
threads = {t.name for t in threading.enumerate()}
import bench
import bench.api  # the whole Python API, imported as a notebook's first call does
after = {"threads": sorted({t.name for t in threading.enumerate()} - threads),
         "env": sorted(k for k in os.environ if os.environ.get(k) != env.get(k))}
try:
    from bench.cli import main
    main(["--version"])
except SystemExit:
    pass
cli = {"threads": sorted({t.name for t in threading.enumerate()} - threads),
       "env": sorted(k for k in os.environ if os.environ.get(k) != env.get(k))}
print(json.dumps({"import": after, "cli": cli}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_import_bench_adds_no_thread_and_no_environment_variable_the_command_does(monkeypatch):
    for name in ("THP_MEM_ALLOC_ENABLE", "MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_",
                 "GLIBC_TUNABLES", "MLFLOW_DISABLE_TELEMETRY"):
        monkeypatch.delenv(name, raising=False)
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=120)
    out = json.loads(done.stdout.splitlines()[-1])  # after the version line
    assert out["import"] == {"threads": [], "env": []}
    assert "bench-heap-watch" in out["cli"]["threads"] and "THP_MEM_ALLOC_ENABLE" in out["cli"]["env"]
