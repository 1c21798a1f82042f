"""PrivBench: a benchmark harness for image privacy mechanisms.

Importing this package is cheap on purpose: heavy modules (torch models, MLflow,
datasets) are imported where they are used.
"""

from bench._memory import tune_allocator

__version__ = "0.1.0"

tune_allocator()  # huge pages and reused buffers for large CPU tensors: see bench/_memory.py

#: Marks the top-level packages as PrivBench's own (``tasks``, ``attacks`` and
#: ``leaderboard`` are generic import names that another distribution could shadow).
PRIVBENCH_PACKAGE = True

__all__ = ["__version__", "group_results", "leaderboard", "results", "run"]


def __getattr__(name: str):
    """Imports the Python API (``bench.run``, ``bench.results``, ``bench.group_results``, ``bench.leaderboard``) on first use."""
    if name in ("run", "results", "group_results", "leaderboard"):
        from bench import api

        return getattr(api, name)
    raise AttributeError(f"module 'bench' has no attribute {name!r}")
