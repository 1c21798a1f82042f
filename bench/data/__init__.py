"""Datasets: real-format loaders and deterministic synthetic generators."""

from bench.data.base import Dataset, ImageSet, Splits, load_dataset

__all__ = ["Dataset", "ImageSet", "Splits", "load_dataset"]
