"""Test-wide settings: keep every tool's files inside the project, never in the home dir."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Callable

import pytest

ROOT = Path(__file__).resolve().parents[1]
_STATE = ROOT / ".cache" / "test-home"
for _var, _sub in (
    ("MPLCONFIGDIR", "matplotlib"),
    ("TORCH_HOME", "torch"),
    ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
    ("HF_HOME", "huggingface"),
    ("BENCH_DERIVED", "derived"),  # answers the bench command keeps (bench/storage/derived.py)
    ("HOME", "home"),
):
    os.environ[_var] = str(_STATE / _sub)
    (_STATE / _sub).mkdir(parents=True, exist_ok=True)
# Tools that write under the home directory (Ray's auth token, Chromium's profile) now
# write under .cache/test-home/home; Ray must not phone home either.
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
os.environ["MLFLOW_TRACKING_URI"] = ""
os.environ.pop("BENCH_DATA", None)
os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture
def results_dir(tmp_path: Path) -> Path:
    """A fresh results directory (MLflow database, artifacts, cache)."""
    path = tmp_path / "results"
    path.mkdir()
    return path


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache directory shared by the whole session (generated datasets, trained models)."""
    return tmp_path_factory.mktemp("cache")


def load_benchmark(stem: str) -> ModuleType:
    """Imports ``benchmarks/<stem>.py`` by path, once, under the name benchmarks/peers.py gives it.

    benchmarks/ is no package (and opacus installs one named ``benchmarks``).
    """
    name = f"_privbench_benchmarks_{stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{stem}.py")
        sys.modules[name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture
def benchmark_script() -> Callable[[str], ModuleType]:
    """:func:`load_benchmark`, for tests that load a benchmark script."""
    return load_benchmark
