"""Disk-backed images: Arrow shards in Hugging Face ``datasets``' on-disk format, memory-mapped.

A split's pixels are stored as a folder that ``datasets.load_from_disk`` opens::

    <split>/data-00000.arrow ...   Arrow IPC streams, one ``pixels`` (binary) row per image
    <split>/state.json             the shard list, as ``Dataset.save_to_disk`` writes it
    <split>/dataset_info.json      the features

They are written with pyarrow directly (``save_to_disk`` re-encodes rows and is ~50 MB/s
here) and read memory-mapped: :class:`ShardedImages` reads only the images an index
selects, so a split of any size costs the memory of the batch in hand. Each shard stays
below ``SHARD_BYTES``.
"""

from __future__ import annotations

import bisect
import json
import os
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import torch

SHARD_BYTES = 256 << 20
PIXELS = "pixels"
STATE = "state.json"
INFO = "dataset_info.json"
MATERIALIZE_BYTES = int(os.environ.get("BENCH_MATERIALIZE_BYTES", str(1 << 30)))
"""Splits smaller than this are read into memory when opened (the small sets of the quick
profiles); larger ones stay on disk and are read batch by batch."""


def configure_huggingface(cache_dir: Path) -> None:
    """Keeps Hugging Face's cache and config under the project's cache directory, offline."""
    os.environ.setdefault("HF_HOME", str(Path(cache_dir).resolve() / "huggingface"))
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["HF_DATASETS_OFFLINE"] = "1"


class SplitWriter:
    """Writes one split's images shard by shard into a folder (created).

    Every batch added becomes Arrow record batches of the open shard (no copy beyond the
    file write); a shard is closed when it holds ``SHARD_BYTES``.

    Args:
        folder: The split's folder.
        chw: (channels, height, width) of every image.
        digest: Keep an xxh3 of every pixel written (:meth:`digest`), for content fingerprints.
    """

    def __init__(self, folder: Path, chw: Sequence[int], digest: bool = False):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.chw = tuple(int(d) for d in chw)
        self.image_bytes = int(np.prod(self.chw))
        self.per_shard = max(1, SHARD_BYTES // self.image_bytes)
        self.files: list[str] = []
        self.counts: list[int] = []
        self._sink: Any = None
        self._writer: Any = None
        self._hash = None
        if digest:
            import xxhash

            self._hash = xxhash.xxh3_128()

    def digest(self) -> str:
        """Returns the xxh3-128 of every pixel written so far, in order."""
        if self._hash is None:
            raise ValueError("this writer keeps no digest (digest=False)")
        return self._hash.hexdigest()

    def add(self, images: torch.Tensor) -> None:
        """Appends a batch of uint8 images [n, C, H, W] (in order)."""
        if images.dtype != torch.uint8 or tuple(images.shape[1:]) != self.chw:
            raise ValueError(f"expected uint8 images of shape {self.chw}, got {images.dtype} {tuple(images.shape)}")
        flat = images.detach().cpu().contiguous().view(len(images), self.image_bytes).numpy()
        if self._hash is not None:
            self._hash.update(flat.data)
        start = 0
        while start < len(flat):
            if self._writer is None:
                self._open_shard()
            take = min(self.per_shard - self.counts[-1], len(flat) - start)
            self._write(flat[start : start + take])
            start += take
            if self.counts[-1] == self.per_shard:
                self._close_shard()

    def close(self) -> int:
        """Closes the last shard and writes the metadata; returns the number of images."""
        if not self.files:
            self._open_shard()
            self._write(np.empty((0, self.image_bytes), np.uint8))
        self._close_shard()
        state = {"_data_files": [{"filename": f} for f in self.files], "_fingerprint": None,
                 "_format_columns": None, "_format_kwargs": {}, "_format_type": None,
                 "_output_all_columns": False, "_split": None}
        (self.folder / STATE).write_text(json.dumps(state, indent=2))
        info = {"citation": "", "description": "uint8 images, one row each, C x H x W = " + "x".join(map(str, self.chw)),
                "features": {PIXELS: {"dtype": "binary", "_type": "Value"}}, "homepage": "", "license": ""}
        (self.folder / INFO).write_text(json.dumps(info, indent=2))
        return sum(self.counts)

    def _open_shard(self) -> None:
        import pyarrow as pa

        name = f"data-{len(self.files):05d}.arrow"
        self._sink = pa.OSFile(str(self.folder / name), "wb")
        self._writer = pa.ipc.new_stream(self._sink, pa.schema([(PIXELS, pa.binary())]))
        self.files.append(name)
        self.counts.append(0)

    def _write(self, rows: np.ndarray) -> None:
        import pyarrow as pa

        n = len(rows)
        offsets = pa.py_buffer(np.arange(0, (n + 1) * self.image_bytes, self.image_bytes, dtype=np.int32))
        column = pa.Array.from_buffers(pa.binary(), n, [None, offsets, pa.py_buffer(np.ascontiguousarray(rows))])
        self._writer.write_batch(pa.record_batch([column], names=[PIXELS]))
        self.counts[-1] += n

    def _close_shard(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._sink.close()
        self._writer = self._sink = None


class ShardedImages:
    """uint8 images [N, C, H, W] kept in Arrow shards on disk; indexing reads only what it returns.

    It behaves like the tensor it stands for where the harness reads images: ``shape``,
    ``len``, ``dtype``, ``numel()`` and indexing by an int, a slice, an index tensor, a
    boolean mask or a list return a uint8 CPU tensor of the selected images, read from the
    memory-mapped shards. :meth:`batches` streams it in order.

    Args:
        folder: The split's folder (see :class:`SplitWriter`).
        chw: (channels, height, width).
    """

    dtype = torch.uint8
    device = torch.device("cpu")

    def __init__(self, folder: Path, chw: Sequence[int]):
        self.folder = Path(folder)
        self.chw = tuple(int(d) for d in chw)
        self.width = int(np.prod(self.chw))
        state = json.loads((self.folder / STATE).read_text())
        self.files = [f["filename"] for f in state["_data_files"]]
        self._tables: list[Any] | None = None
        self.counts = [len(t) for t in self._open()]
        self.starts = list(np.cumsum([0, *self.counts]))
        self.shape = torch.Size((self.starts[-1], *self.chw))

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_tables": None}  # worker processes map the files themselves

    def _open(self) -> list[Any]:
        if self._tables is None:
            import pyarrow as pa

            self._tables = [pa.ipc.open_stream(pa.memory_map(str(self.folder / f))).read_all().column(PIXELS)
                            for f in self.files]
        return self._tables

    def __len__(self) -> int:
        return int(self.shape[0])

    def numel(self) -> int:
        """Values in all images."""
        return int(np.prod(self.shape))

    def dim(self) -> int:
        """4, as the tensor it stands for."""
        return 4

    @property
    def nbytes(self) -> int:
        """Bytes of all images."""
        return self.numel()

    def __getitem__(self, index: Any) -> torch.Tensor:
        if isinstance(index, int):
            return self._gather(np.array([index % len(self)]))[0]
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step == 1:
                return self._range(start, max(start, stop))
            return self._gather(np.arange(start, stop, step))
        if isinstance(index, torch.Tensor):
            if index.dtype == torch.bool:
                index = index.nonzero().flatten()
            return self._gather(index.reshape(-1).cpu().numpy()).view(*index.shape, *self.chw)
        return self._gather(np.asarray(index, dtype=np.int64))

    def batches(self, size: int) -> Iterator[torch.Tensor]:
        """Yields the images in order, ``size`` at a time."""
        for start in range(0, len(self), size):
            yield self._range(start, min(start + size, len(self)))

    def materialize(self) -> torch.Tensor:
        """Returns every image as one in-memory tensor."""
        return self._range(0, len(self))

    def _range(self, start: int, stop: int) -> torch.Tensor:
        out = torch.empty((stop - start, *self.chw), dtype=torch.uint8)
        flat = out.view(stop - start, self.width).numpy()
        row = 0
        shard = bisect.bisect_right(self.starts, start) - 1
        while row < stop - start:
            first = start + row - self.starts[shard]
            take = min(self.counts[shard] - first, stop - start - row)
            flat[row : row + take] = _rows(self._open()[shard].slice(first, take), self.width)
            row += take
            shard += 1
        return out

    def _gather(self, index: np.ndarray) -> torch.Tensor:
        import pyarrow as pa

        index = np.where(index < 0, index + len(self), index).astype(np.int64)
        if len(index) and (index.min() < 0 or index.max() >= len(self)):
            raise IndexError(f"index out of range for {len(self)} images")
        out = torch.empty((len(index), *self.chw), dtype=torch.uint8)
        flat = out.view(len(index), self.width).numpy()
        shard_of = np.searchsorted(self.starts, index, side="right") - 1
        for shard in np.unique(shard_of):
            rows = np.nonzero(shard_of == shard)[0]
            local = pa.array(index[rows] - self.starts[shard])
            flat[rows] = _rows(self._open()[shard].take(local), self.width)
        return out


def _rows(column: Any, width: int) -> np.ndarray:
    """Returns a binary column's values as a [rows, width] uint8 array (a view of its buffer)."""
    parts = []
    for chunk in getattr(column, "chunks", [column]):
        if len(chunk) == 0:
            continue
        buffers = chunk.buffers()
        offsets = np.frombuffer(buffers[1], dtype=np.int32, count=len(chunk) + 1, offset=4 * chunk.offset)
        data = np.frombuffer(buffers[2], dtype=np.uint8, count=int(offsets[-1] - offsets[0]), offset=int(offsets[0]))
        parts.append(data.reshape(len(chunk), width))
    return parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else np.empty((0, width), np.uint8)


def open_split(folder: Path, chw: Sequence[int]) -> torch.Tensor | ShardedImages:
    """Opens a split: in memory when smaller than ``MATERIALIZE_BYTES``, else on disk."""
    images = ShardedImages(folder, chw)
    return images.materialize() if images.nbytes < MATERIALIZE_BYTES else images


def write_tensor(folder: Path, images: torch.Tensor, batch: int = 4096) -> int:
    """Writes an in-memory uint8 tensor [N, C, H, W] as a split folder; returns N."""
    writer = SplitWriter(folder, images.shape[1:])
    for start in range(0, len(images), batch):
        writer.add(images[start : start + batch])
    return writer.close()
