"""Many cells: grids, suites, executors, a Ray cluster, and multi-objective tuning."""
