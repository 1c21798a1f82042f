"""The dataset interface and loading a registered dataset by name.

Image sets and splits live in :mod:`bench.core.splits`, cache helpers in
:mod:`bench.data.caching`; both are re-exported here.
"""

from __future__ import annotations

import abc
import contextlib
import contextvars
import json
from dataclasses import fields
from pathlib import Path
from typing import Any, ClassVar, Iterator, Mapping

from bench.core.splits import DataShape, ImageSet, Splits, SplitShape
from bench.data.caching import (
    VERIFY_BYTES,
    SplitsSink,
    cached_sharded_splits,
    cached_splits,
    content_digest,
    fingerprint,
    size_report,
    source_fingerprint,
)
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
    "load_public",
    "recording_reads",
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
    class_split: ClassVar[str] = ""
    """The option that divides the classes among train / val / test: ``split_fractions`` (three
    fractions) or ``split_ids`` (three counts), named where a split has too few classes; empty: fixed."""
    version: ClassVar[int] = 1
    """The loader's or generator's version: bump whenever the images or labels it gives change.
    Part of every cell and board key (:func:`bench.cell.protocol.code_versions`)."""

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


_READS: contextvars.ContextVar[list[dict[str, Any]] | None] = contextvars.ContextVar("data_reads", default=None)


@contextlib.contextmanager
def recording_reads(verify_data: bool = False) -> Iterator[list[dict[str, Any]]]:
    """Records every dataset :func:`load_dataset` and :func:`load_public` load inside the block.

    A cell reads more than its own dataset (a transfer task's target, the public set a
    mechanism fits on); each read is recorded with what loads it again and its content
    fingerprint, so that a cached result is checked against all the data behind it.

    Args:
        verify_data: Fingerprint real source files by their bytes in every load inside the
            block that does not say otherwise.

    Yields:
        The reads, in order, without repeats: dicts of ``dataset``, ``part`` (``splits`` or
        ``public``), ``options`` (as JSON gives them back), ``fingerprint`` and ``synthetic``.
    """
    reads: list[dict[str, Any]] = []
    token = _READS.set(reads)
    try:
        with _verifying(verify_data):
            yield reads
    finally:
        _READS.reset(token)


@contextlib.contextmanager
def _verifying(verify_data: bool | None) -> Iterator[None]:
    """Sets how source files are fingerprinted inside the block (None: as they are now)."""
    token = VERIFY_BYTES.set(VERIFY_BYTES.get() if verify_data is None else verify_data)
    try:
        yield
    finally:
        VERIFY_BYTES.reset(token)


def read_entry(name: str, part: str, options: Mapping[str, Any], digest: str, synthetic: bool) -> dict[str, Any]:
    """Returns one read as :func:`recording_reads` records it (options as a JSON round trip gives them)."""
    return {"dataset": name, "part": part, "options": json.loads(json.dumps(dict(options), default=str)),
            "fingerprint": digest, "synthetic": bool(synthetic)}


def _record(dataset: type[Dataset], part: str, options: Mapping[str, Any], digest: str) -> None:
    reads = _READS.get()
    entry = read_entry(dataset.name, part, options, digest, dataset.synthetic)
    if reads is not None and entry not in reads:
        reads.append(entry)


def image_set_digest(images: ImageSet) -> str:
    """Returns the content digest of an image set (images, labels, attributes, boxes, cameras)."""
    return content_digest({f.name: getattr(images, f.name) for f in fields(images)})


def load_dataset(name: str, root: Path | None, options: Mapping[str, Any], cache_dir: Path,
                 verify_data: bool | None = None) -> Splits:
    """Loads a registered dataset by name (recorded inside :func:`recording_reads`).

    Args:
        name: Registered dataset name.
        root: Data root of real datasets.
        options: Loader options.
        cache_dir: Where decoded or generated splits are cached.
        verify_data: Fingerprint real source files by their bytes rather than by size and
            modification time (slower; catches a file rewritten in place with its old mtime).
            None: as the enclosing :func:`recording_reads` says (else no).
    """
    from bench.core.registry import datasets

    dataset = datasets.get(name)
    with _verifying(verify_data):
        splits = dataset().load(root, options, cache_dir)
    _record(dataset, "splits", options, splits.fingerprint)
    return splits


def load_public(name: str, root: Path | None, options: Mapping[str, Any], cache_dir: Path,
                verify_data: bool | None = None) -> ImageSet | None:
    """Loads a registered dataset's public set (:meth:`Dataset.load_public`; recorded inside :func:`recording_reads`).

    Args:
        name, root, options, cache_dir, verify_data: As for :func:`load_dataset`.

    Returns:
        The public set, or None where the dataset has none.
    """
    from bench.core.registry import datasets

    dataset = datasets.get(name)
    with _verifying(verify_data):
        public = dataset().load_public(root, options, cache_dir)
    if public is not None:
        _record(dataset, "public", options, image_set_digest(public))
    return public
