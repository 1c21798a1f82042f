"""The version of PrivBench (importable from every layer; ``bench.__version__`` is this)."""

__version__ = "0.1.0"
