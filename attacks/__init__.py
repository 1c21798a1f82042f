"""PrivBench attacks."""

PRIVBENCH_PACKAGE = True
