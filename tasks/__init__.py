"""PrivBench tasks."""

PRIVBENCH_PACKAGE = True
