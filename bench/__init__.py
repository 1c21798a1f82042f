"""PrivBench: a benchmark harness for image privacy mechanisms.

Importing this package is cheap on purpose: heavy modules (torch models, MLflow,
datasets) are imported where they are used.
"""

import os

__version__ = "0.1.0"

# Large CPU tensors (a batch's release, a mechanism's output) on transparent huge pages:
# a fresh 2 MB page faults once where 512 small ones fault each, which made a mechanism's
# cost per value grow with the batch. PyTorch reads this once, at its first allocation, so
# it counts where bench is imported before torch (the CLI, grid workers); THP_MEM_ALLOC_ENABLE=0
# turns it off. It changes where memory lies, never a value.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

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
