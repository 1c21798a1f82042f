"""PrivBench leaderboard."""

PRIVBENCH_PACKAGE = True
