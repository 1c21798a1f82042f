"""Image sets, splits and the dataset interface."""

from __future__ import annotations

import abc
import contextvars
import hashlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping, Sequence

import torch

from bench.errors import BenchError


@dataclass
class ImageSet:
    """Images of one split with their labels.

    Attributes:
        images: uint8 images [N, C, H, W] on the CPU: a tensor, or
            :class:`bench.datasets.shards.ShardedImages` for a split kept on disk (indexing
            it reads the selected images; stream it with ``batches``).
        labels: int64 tensor [N]: identity (faces, persons) or class.
        attrs: Attribute name -> int64 tensor [N]; -1 marks a missing label.
        attr_names: Attribute name -> names of its values (index = value).
        boxes: One float32 tensor [k_i, 4] of (x1, y1, x2, y2) pixel boxes per image, or None
            when the dataset has no boxes.
        cams: int64 tensor [N] of camera ids, or None.
    """

    images: torch.Tensor
    labels: torch.Tensor
    attrs: dict[str, torch.Tensor] = field(default_factory=dict)
    attr_names: dict[str, list[str]] = field(default_factory=dict)
    boxes: list[torch.Tensor] | None = None
    cams: torch.Tensor | None = None

    def __post_init__(self) -> None:
        n = self.images.shape[0]
        if self.images.dtype != torch.uint8 or len(self.images.shape) != 4:
            raise ValueError("ImageSet.images must be uint8 images [N, C, H, W] (a tensor or ShardedImages)")
        if self.labels.shape != (n,):
            raise ValueError("ImageSet.labels must have shape [N]")
        for name, values in self.attrs.items():
            if values.shape != (n,):
                raise ValueError(f"attribute {name!r} must have shape [N]")
        if self.boxes is not None and len(self.boxes) != n:
            raise ValueError("ImageSet.boxes must hold one tensor per image")
        if self.cams is not None and self.cams.shape != (n,):
            raise ValueError("ImageSet.cams must have shape [N]")

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def subset(self, index: torch.Tensor | slice) -> "ImageSet":
        """Returns the images selected by a slice, an index tensor or a boolean mask."""
        if isinstance(index, torch.Tensor) and index.dtype == torch.bool:
            index = index.nonzero().flatten()
        boxes = None
        if self.boxes is not None:
            picked = range(len(self))[index] if isinstance(index, slice) else index.tolist()
            boxes = [self.boxes[i] for i in picked]
        return ImageSet(
            images=self.images[index],
            labels=self.labels[index],
            attrs={k: v[index] for k, v in self.attrs.items()},
            attr_names=self.attr_names,
            boxes=boxes,
            cams=None if self.cams is None else self.cams[index],
        )

    def with_images(self, images: torch.Tensor) -> "ImageSet":
        """Returns a copy carrying other images (same labels): a released split."""
        if images.shape != self.images.shape:
            raise ValueError(f"released images have shape {tuple(images.shape)}, expected {tuple(self.images.shape)}")
        return replace(self, images=images)


@dataclass
class Splits:
    """The splits of one dataset.

    Attributes:
        dataset: Registered dataset name.
        sets: Split name -> images ("train", "val", "test"; "query", "gallery" for reID).
        fingerprint: Digest of the decoded content (images, labels, attributes, boxes and
            split membership): equal for two copies of a dataset, changed by any pixel.
        synthetic: Whether the data is a synthetic stand-in.
        info: Free-form facts for reports (sizes, source, options).
    """

    dataset: str
    sets: dict[str, ImageSet]
    fingerprint: str
    synthetic: bool = False
    info: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, split: str) -> ImageSet:
        try:
            return self.sets[split]
        except KeyError:
            raise KeyError(f"dataset {self.dataset!r} has no split {split!r} (has {', '.join(self.sets)})") from None

    def __contains__(self, split: str) -> bool:
        return split in self.sets

    def replace_images(self, images: Mapping[str, torch.Tensor]) -> "Splits":
        """Returns splits whose images are replaced split by split (labels kept)."""
        return replace(self, sets={name: s.with_images(images[name]) for name, s in self.sets.items()})


@dataclass(frozen=True)
class SplitShape:
    """How many images each class (identity) of a split has: enough to check settings against.

    Attributes:
        counts: Images per class, one entry per class.
    """

    counts: tuple[int, ...]

    @classmethod
    def of_labels(cls, labels: Sequence[int]) -> "SplitShape":
        """Counts the images of each label."""
        from collections import Counter

        return cls(tuple(sorted(Counter(labels).values(), reverse=True)))

    @property
    def images(self) -> int:
        """Images in the split."""
        return sum(self.counts)

    def classes_with(self, at_least: int) -> int:
        """Classes with at least ``at_least`` images."""
        return sum(c >= at_least for c in self.counts)


DataShape = Mapping[str, SplitShape]
"""Split name -> its shape (what :meth:`Dataset.inspect` returns)."""


class Dataset(abc.ABC):
    """A dataset: loads its splits from a local root (real) or generates them (synthetic).

    Subclasses are registered with ``@register_dataset("name")`` and declare ``layout``,
    a one-line description of the files they expect, used in the missing-data error.
    """

    name: ClassVar[str] = ""
    synthetic: ClassVar[bool] = False
    layout: ClassVar[str] = ""
    description: ClassVar[str] = ""

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


_VERIFY_BYTES: contextvars.ContextVar[bool] = contextvars.ContextVar("verify_bytes", default=False)


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

    token = _VERIFY_BYTES.set(verify_data)
    try:
        return datasets.get(name)().load(root, options, cache_dir)
    finally:
        _VERIFY_BYTES.reset(token)


def source_fingerprint(paths: Sequence[Path]) -> str:
    """Returns a hash of the source files a real dataset reads.

    By default each file contributes its name, size and modification time (a stat per
    file); under ``load_dataset(..., verify_data=True)`` its bytes (xxh3-128). A changed
    source therefore changes the dataset's fingerprint, and with it every cache key built
    on it, so decoded splits and releases of the old files are never used.
    """
    import xxhash

    from bench.cache import checksum

    verify = _VERIFY_BYTES.get()
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
        h.update(part.encode() + b"\n")
    return h.hexdigest()


def cached_splits(cache_dir: Path, dataset: str, key: str, build: Callable[[], Any]) -> tuple[Any, str]:
    """Returns a dataset's decoded or generated payload and its content fingerprint, building it once.

    The entry's ``key`` names what the payload is made from (loader version, options,
    annotations, :func:`source_fingerprint` of the image files); the returned fingerprint
    is a digest of the payload itself (:func:`content_digest`), so two copies of a dataset
    give one fingerprint and any changed pixel gives another.
    """
    from bench.cache import Cache

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
        """Returns the :class:`~bench.datasets.shards.SplitWriter` of a split's images (add chunks in order)."""
        from bench.datasets.shards import SplitWriter

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
    from bench.cache import Cache
    from bench.datasets.shards import open_split

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
