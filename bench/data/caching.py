"""Dataset cache entries: building decoded splits once, and the fingerprints that key them."""

from __future__ import annotations

import contextvars
import hashlib
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

from bench.core.splits import ImageSet
from bench.errors import BenchError

__all__ = ["SplitsSink", "cached_sharded_splits", "cached_splits", "content_digest", "fingerprint",
           "size_report", "source_fingerprint"]


VERIFY_BYTES: contextvars.ContextVar[bool] = contextvars.ContextVar("verify_bytes", default=False)
"""Whether :func:`source_fingerprint` hashes the files' bytes (``--verify-data``) rather than size and mtime;
set by :func:`bench.data.base.load_dataset`."""


def size_report(native_hw: Any, source_hw: Any, stored_hw: Sequence[int]) -> dict[str, Any]:
    """Describes what happened to image sizes on the way into the cache (``Splits.info["images"]``).

    Args:
        native_hw: [N, 2] (height, width) of the images as read.
        source_hw: [N, 2] (height, width) of the region each image was resized from (the
            crop; the whole image when none).
        stored_hw: (height, width) stored.

    Returns:
        ``native`` (min / median / max height and width), ``stored``, and ``upscaled``: how
        many images were enlarged to reach the stored size (a mechanism then runs on
        interpolated pixels, not on the pixels of the source).
    """
    import numpy as np

    native = np.asarray(native_hw, dtype=np.int64).reshape(-1, 2)
    source = np.asarray(source_hw, dtype=np.int64).reshape(-1, 2)
    stored = [int(stored_hw[0]), int(stored_hw[1])]
    if not len(native):
        return {"native": None, "stored": stored, "upscaled": 0}
    stats = {name: [int(v) for v in fn(native, axis=0)] for name, fn in
             (("min", np.min), ("median", np.median), ("max", np.max))}
    upscaled = int(((source[:, 0] < stored[0]) | (source[:, 1] < stored[1])).sum())
    return {"native": stats, "stored": stored, "upscaled": upscaled}


def source_fingerprint(paths: Sequence[Path]) -> str:
    """Returns a hash of the source files a real dataset reads.

    By default each file contributes its name, size and modification time (a stat per
    file); under ``load_dataset(..., verify_data=True)`` its bytes (xxh3-128). A changed
    source therefore changes the dataset's fingerprint, and with it every cache key built
    on it, so decoded splits and releases of the old files are never used.
    """
    import xxhash

    from bench.storage.cache import checksum

    verify = VERIFY_BYTES.get()
    h = xxhash.xxh3_128()
    h.update(b"bytes" if verify else b"stat")
    for path in paths:
        path = Path(path)
        try:
            if verify:
                part = f"{path.name}\0{checksum(path)}"
            else:
                st = path.stat()
                part = f"{path.name}\0{st.st_size}\0{st.st_mtime_ns}"
        except OSError as exc:
            raise BenchError(f"cannot read {path}: {exc.strerror or exc}") from None
        h.update(part.encode("utf-8", "surrogateescape") + b"\n")  # names as the file system gave them
    return h.hexdigest()


def cached_splits(cache_dir: Path, dataset: str, key: str, build: Callable[[], Any]) -> tuple[Any, str]:
    """Returns a dataset's decoded or generated payload and its content fingerprint, building it once.

    The entry's ``key`` names what the payload is made from (loader version, options,
    annotations, :func:`source_fingerprint` of the image files); the returned fingerprint
    is a digest of the payload itself (:func:`content_digest`), so two copies of a dataset
    give one fingerprint and any changed pixel gives another.
    """
    from bench.storage.cache import Cache

    def make() -> dict[str, Any]:
        payload = build()
        return {"payload": payload, "content": content_digest(payload)}

    entry, _ = Cache(cache_dir).get_or_build(f"datasets/{dataset}", key, make, describe=dataset)
    return entry["payload"], entry["content"]


class SplitsSink:
    """Where a loader writes its splits into a cache entry: images chunk by chunk, the rest per split.

    Args:
        folder: The entry's folder (being written).
    """

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.meta: dict[str, dict[str, Any]] = {}
        self._writers: dict[str, Any] = {}

    def images(self, split: str, chw: Sequence[int]):
        """Returns the :class:`~bench.data.shards.SplitWriter` of a split's images (add chunks in order)."""
        from bench.data.shards import SplitWriter

        self._writers[split] = SplitWriter(self.folder / "images" / split, chw, digest=True)
        return self._writers[split]

    def describe(self, split: str, labels: torch.Tensor, attrs: Mapping[str, torch.Tensor] | None = None,
                 attr_names: Mapping[str, list[str]] | None = None, boxes: list[torch.Tensor] | None = None,
                 cams: torch.Tensor | None = None) -> None:
        """Records a split's labels, attributes, boxes and cameras (one entry per image, in order)."""
        self.meta[split] = {"labels": labels, "attrs": dict(attrs or {}), "attr_names": dict(attr_names or {}),
                            "boxes": boxes, "cams": cams}

    def put(self, split: str, images: ImageSet, batch: int = 4096) -> None:
        """Writes a whole in-memory split."""
        writer = self.images(split, images.images.shape[1:])
        for start in range(0, len(images), batch):
            writer.add(images.images[start : start + batch])
        self.describe(split, images.labels, images.attrs, images.attr_names, images.boxes, images.cams)

    def finish(self, info: Mapping[str, Any]) -> None:
        """Closes every split and writes ``meta.pt`` with a digest of the whole content."""
        import xxhash

        h = xxhash.xxh3_128()
        splits = {}
        for split, writer in self._writers.items():
            count = writer.close()
            if split not in self.meta or len(self.meta[split]["labels"]) != count:
                raise ValueError(f"split {split!r}: {count} images but labels for "
                                 f"{len(self.meta.get(split, {}).get('labels', []))}")
            h.update(f"{split}:{writer.chw}:{writer.digest()}:{content_digest(self.meta[split])}".encode())
            splits[split] = {**self.meta[split], "chw": list(writer.chw)}
        torch.save({"splits": splits, "info": dict(info), "content": h.hexdigest()[:16]}, self.folder / "meta.pt")


def cached_sharded_splits(
    cache_dir: Path, dataset: str, key: str, build: Callable[[SplitsSink], Mapping[str, Any]]
) -> tuple[dict[str, ImageSet], str, dict[str, Any]]:
    """Returns a real dataset's splits kept in Arrow shards (decoded once), their fingerprint and info.

    ``build(sink)`` decodes the data into the sink (images chunk by chunk, so a dataset
    larger than memory streams through) and returns the info; the entry is verified like
    every cache entry. Splits smaller than ``MATERIALIZE_BYTES`` are read into memory.

    Returns:
        Split -> images (``ShardedImages`` or tensors), the content fingerprint (pixels and
        labels), and the info.
    """
    from bench.data.shards import open_split
    from bench.storage.cache import Cache

    def fill(folder: Path) -> None:
        sink = SplitsSink(folder)
        sink.finish(build(sink))

    folder, _ = Cache(cache_dir).get_or_write(f"datasets/{dataset}", key, fill, describe=dataset)
    meta = torch.load(folder / "meta.pt", map_location="cpu", weights_only=True)
    sets = {}
    for split, fields in meta["splits"].items():
        chw = fields.pop("chw")
        sets[split] = ImageSet(images=open_split(folder / "images" / split, chw), **fields)
    return sets, meta["content"], meta["info"]


def content_digest(payload: Any) -> str:
    """Returns a 16-hex-digit digest of a payload's tensors and values (its ``info`` left out).

    ``info`` holds facts for people (source paths, counts), which differ between copies of
    one dataset and do not change a number.
    """
    import xxhash

    h = xxhash.xxh3_128()

    def walk(obj: Any, where: str) -> None:
        if isinstance(obj, torch.Tensor):
            t = obj.detach().cpu().contiguous()
            h.update(f"{where}:{t.dtype}:{tuple(t.shape)}".encode())
            if t.numel():
                h.update(t.view(-1).view(torch.uint8).numpy().data)
        elif hasattr(obj, "batches"):  # images kept on disk: hashed as the tensor they stand for
            h.update(f"{where}:{obj.dtype}:{tuple(obj.shape)}".encode())
            for batch in obj.batches(4096):
                h.update(batch.reshape(-1).numpy().data)
        elif isinstance(obj, Mapping):
            for k in sorted(obj, key=str):
                if not (where == "" and k == "info"):
                    walk(obj[k], f"{where}/{k}")
        elif isinstance(obj, (list, tuple)):
            h.update(f"{where}:{type(obj).__name__}{len(obj)}".encode())
            for i, item in enumerate(obj):
                walk(item, f"{where}[{i}]")
        else:
            h.update(f"{where}={obj!r}".encode())

    walk(payload, "")
    return h.hexdigest()[:16]


def fingerprint(*parts: Any) -> str:
    """Returns a short, stable content hash of strings, bytes and tensors."""
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, torch.Tensor):
            t = part.detach().cpu().contiguous()
            h.update(str((t.dtype, tuple(t.shape))).encode())
            h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        elif isinstance(part, bytes):
            h.update(part)
        else:
            h.update(repr(part).encode())
        h.update(b"\x1f")
    return h.hexdigest()[:16]
