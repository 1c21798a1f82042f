"""PrivBench mechanisms."""

PRIVBENCH_PACKAGE = True
