"""Image sets, the splits of a dataset and their shapes."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

import torch

__all__ = ["DataShape", "ImageSet", "SplitShape", "Splits"]


@dataclass
class ImageSet:
    """Images of one split with their labels.

    Attributes:
        images: uint8 images [N, C, H, W] on the CPU: a tensor, or
            :class:`bench.data.shards.ShardedImages` for a split kept on disk (indexing
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
        attributes: The attributes its images are labelled with (``gender``); None: not
            known before the data is loaded.
        cameras: ``(identity, camera, images)`` for every identity and camera of the split,
            sorted; None: the data has no camera ids (or they are not known before loading).
        faces: Images carrying at least one face box (0: none has, e.g. the data has no
            boxes); None: not known before the data is loaded.
        stored: (height, width) its images are stored (and released) at, where the loader
            reads it from the images' headers; None: not known before the data is loaded.
    """

    counts: tuple[int, ...]
    attributes: tuple[str, ...] | None = None
    cameras: tuple[tuple[int, int, int], ...] | None = None
    faces: int | None = None
    stored: tuple[int, int] | None = None

    @classmethod
    def of_labels(cls, labels: Sequence[int], attributes: Sequence[str] | None = None,
                  cameras: Sequence[int] | None = None, faces: int | None = None) -> "SplitShape":
        """Counts the images of each label (and, given each image's camera, of each label and camera)."""
        from collections import Counter

        by_camera = None
        if cameras is not None:
            by_camera = tuple(sorted((int(i), int(c), n) for (i, c), n in Counter(zip(labels, cameras)).items()))
        return cls(tuple(sorted(Counter(labels).values(), reverse=True)),
                   None if attributes is None else tuple(attributes), by_camera, faces)

    def camera_images(self) -> dict[int, dict[int, int]]:
        """Returns identity -> camera -> images (empty when the cameras are not known)."""
        out: dict[int, dict[int, int]] = {}
        for identity, camera, images in self.cameras or ():
            out.setdefault(identity, {})[camera] = images
        return out

    @property
    def images(self) -> int:
        """Images in the split."""
        return sum(self.counts)

    def classes_with(self, at_least: int) -> int:
        """Classes with at least ``at_least`` images."""
        return sum(c >= at_least for c in self.counts)


DataShape = Mapping[str, SplitShape]
"""Split name -> its shape (what :meth:`Dataset.inspect` returns)."""
