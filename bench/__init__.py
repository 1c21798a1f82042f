"""PrivBench: a benchmark harness for image privacy mechanisms.

Importing this package is cheap on purpose: heavy modules (torch models, MLflow,
datasets) are imported where they are used.
"""

__version__ = "0.1.0"

#: Marks the top-level packages as PrivBench's own (``tasks``, ``attacks`` and
#: ``leaderboard`` are generic import names that another distribution could shadow).
PRIVBENCH_PACKAGE = True
