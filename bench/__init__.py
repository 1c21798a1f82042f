"""PrivBench: a benchmark harness for image privacy mechanisms.

Importing this package is cheap on purpose, and changes nothing in the process: heavy
modules (torch models, MLflow, datasets) are imported where they are used, and the memory
tuning of :mod:`bench.system.memory` (an environment variable, glibc's heap settings, a watch
thread) starts only when a cell runs or the ``bench`` command starts, or when a script
opts in with :func:`tune_allocator` before importing torch.
"""

from bench.core.version import __version__

#: Marks the top-level packages as PrivBench's own (``tasks``, ``attacks`` and
#: ``leaderboard`` are generic import names that another distribution could shadow).
PRIVBENCH_PACKAGE = True

_API = ("grid", "group_results", "leaderboard", "list_mechanisms", "load_mechanism", "results", "run", "runs", "tune")

__all__ = ["__version__", *_API, "tune_allocator"]


def __getattr__(name: str):
    """Imports the Python API (``bench.run``, ``bench.grid``, ``bench.load_mechanism``, ...) on first use."""
    if name in _API:
        from bench import api

        return getattr(api, name)
    if name == "tune_allocator":
        from bench.system.memory import tune_allocator

        return tune_allocator
    raise AttributeError(f"module 'bench' has no attribute {name!r}")
