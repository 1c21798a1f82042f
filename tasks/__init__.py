"""PrivBench tasks: the utility task kinds (fewshot, reid, fidelity) and, in
``tasks/benchmarks.py``, the benchmarks declared on them (one line each)."""

PRIVBENCH_PACKAGE = True
