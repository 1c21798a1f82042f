"""The dataset interface and loading a registered dataset by name.

Image sets and splits live in :mod:`bench.datasets.splits`, cache helpers in
:mod:`bench.datasets.caching`; both are re-exported here.
"""

from __future__ import annotations

import abc
from pathlib import Path
from typing import Any, ClassVar, Mapping

from bench.datasets.caching import (
    VERIFY_BYTES,
    SplitsSink,
    cached_sharded_splits,
    cached_splits,
    content_digest,
    fingerprint,
    size_report,
    source_fingerprint,
)
from bench.datasets.splits import DataShape, ImageSet, Splits, SplitShape
from bench.errors import BenchError

__all__ = [
    "DataShape",
    "Dataset",
    "ImageSet",
    "SplitShape",
    "Splits",
    "SplitsSink",
    "cached_sharded_splits",
    "cached_splits",
    "content_digest",
    "fingerprint",
    "load_dataset",
    "size_report",
    "source_fingerprint",
]


class Dataset(abc.ABC):
    """A dataset: loads its splits from a local root (real) or generates them (synthetic).

    Subclasses are registered with ``@register_dataset("name")`` and declare ``layout``,
    a one-line description of the files they expect, used in the missing-data error.
    """

    name: ClassVar[str] = ""
    synthetic: ClassVar[bool] = False
    layout: ClassVar[str] = ""
    description: ClassVar[str] = ""
    version: ClassVar[int] = 1
    """The loader's or generator's version: bump whenever the images or labels it gives change.
    Part of every cell and board key (:func:`bench.cells.code_versions`)."""

    @abc.abstractmethod
    def load(self, root: Path | None, options: Mapping[str, Any], cache_dir: Path) -> Splits:
        """Loads (or generates) the splits.

        Args:
            root: The data root (``--data-root`` / ``BENCH_DATA``); None when not given.
            options: Loader options from the task's profile (sizes, split sizes, ...).
            cache_dir: Directory for decoded or generated caches.

        Raises:
            BenchError: The data is missing or malformed; the message names the layout.
        """

    def inspect(self, root: Path | None, options: Mapping[str, Any]) -> DataShape | None:
        """Checks that the data is there and the options are valid, cheaply and writing nothing.

        Called while a cell is planned, before any work. Returns the splits' shapes when
        they are cheap to know (then tasks and attacks check their settings against them),
        else None.

        Raises:
            BenchError: Missing data (naming the layout) or invalid options.
        """
        return None

    def load_public(self, root: Path | None, options: Mapping[str, Any], cache_dir: Path) -> ImageSet | None:
        """Loads public data for mechanisms that fit (a generator, clip bounds): never released.

        Its identities (or images) are disjoint from every split :meth:`load` returns, so a
        claim about released images is not weakened by having fitted on them. None when the
        dataset has no such data; the release then fits on the train split and withholds
        its claim for that split.
        """
        return None

    def missing(self, root: Path | None, what: str) -> BenchError:
        """Returns the error for data that is not where the layout says."""
        where = f"under {root}" if root is not None else "(no --data-root or BENCH_DATA given)"
        return BenchError(f"{self.name}: {what} not found {where}; expected {self.layout}")


def load_dataset(name: str, root: Path | None, options: Mapping[str, Any], cache_dir: Path,
                 verify_data: bool = False) -> Splits:
    """Loads a registered dataset by name.

    Args:
        name: Registered dataset name.
        root: Data root of real datasets.
        options: Loader options.
        cache_dir: Where decoded or generated splits are cached.
        verify_data: Fingerprint real source files by their bytes rather than by size and
            modification time (slower; catches a file rewritten in place with its old mtime).
    """
    from bench.registry import datasets

    token = VERIFY_BYTES.set(verify_data)
    try:
        return datasets.get(name)().load(root, options, cache_dir)
    finally:
        VERIFY_BYTES.reset(token)
