"""Face crops of scenes: what a face-identifying adversary sees of a release whose faces have identities.

In a scene dataset (synth_scenes; imagenet given ``face_identities``; any data whose
``Splits.info["faces"]`` holds, per split, a face table with ``image``, ``identity`` and
``box`` columns) a face adversary
does what a real pipeline does with a released photo: it crops each annotated face and
identifies it. :func:`face_crop_view` turns the clean splits and the release into face
datasets of the same shape as synth_faces, so ``face_reid``, ``face_reid_adapted`` and
``denoise`` run unchanged:

- every face becomes a square crop around its box (``MARGIN`` times its longer side,
  zero outside the image), resampled to ``size`` pixels by area averaging; the released
  crop is cut from the released image at the same place;
- identities are dealt by a seeded permutation into the adversary's own people
  (``train``, half), and two disjoint target groups (``val``, a fifth, for tuning cells;
  ``test``, the rest); each view split holds every face of its people from every split of
  the scenes (all of them are released; a split that is another one's images, as
  imagenet's ``val`` under ``val_from=official``, is counted once);
- labels are identities; the face's gender, age group and skin tone, where the table has
  them (:data:`ATTRIBUTES`; imagenet's identities have none), are its attributes (results
  per group); ``boxes`` is the face's box inside its crop;
- each split is a :class:`FaceCrops` that knows where its crops were cut from
  (:class:`CropOrigin`), so an adversary that runs the mechanism over its own faces
  (``face_reid_adapted``, ``denoise``, the pretrained recognizers' adapted enrolment) gets
  what the release made of them: :func:`bench.release.dataset.apply_to_split` runs the
  mechanism over their scenes, at the scenes' size and with every face box of the scene, and
  cuts the crops from the result (:func:`release_crops`). Run over the crops themselves, a
  mechanism whose effect depends on the image's size (pixelation's blocks, a blur's radius,
  a model fitted on the scenes) would make other images than the release, and the adversary
  would adapt to the wrong ones.

The view's fingerprint and release key hold a digest of the face tables, since a table
supplied apart from the images (imagenet's) is not part of the dataset's fingerprint.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

import torch

from bench.core.interfaces import Release
from bench.core.keys import content_key
from bench.data.base import ImageSet, Splits, content_digest
from bench.errors import BenchError
from bench.randomness.seeding import make_generator

VIEW_VERSION = 3
"""2: keys hold the face tables' digest; 3: a mechanism reaches an adversary's crops through their scenes."""
KEYED_WITHOUT_CROPS = 2
"""The view version in the key of a cell whose adversaries see no face crops (:func:`keyed_version`)."""
MARGIN = 1.3
SHARES = {"train": 0.5, "val": 0.2}
ATTRIBUTES = ("gender", "age_group", "skin_tone")
"""Columns of a face table that become the crops' attributes when every split's table has them."""


@dataclass(frozen=True)
class CropOrigin:
    """Where each face crop of a set was cut from.

    Attributes:
        scenes: The clean scene splits the faces are in (with their face boxes).
        split: int64 [N]: each crop's scene split (index into ``scenes``).
        image: int64 [N]: its scene in that split.
        box: float32 [N, 4]: its face box in the scene's pixels.
        size: Side of the crops in pixels.
    """

    scenes: tuple[ImageSet, ...]
    split: torch.Tensor
    image: torch.Tensor
    box: torch.Tensor
    size: int

    def subset(self, index: torch.Tensor | slice) -> "CropOrigin":
        """Returns the origins of the crops selected as :meth:`ImageSet.subset` selects them."""
        if isinstance(index, slice):
            index = torch.arange(len(self.split))[index]
        elif index.dtype == torch.bool:
            index = index.nonzero().flatten()
        return dataclasses.replace(self, split=self.split[index], image=self.image[index], box=self.box[index])

    @staticmethod
    def concat(origins: "list[CropOrigin]") -> "CropOrigin | None":
        """Returns the origins of crop sets put one after another (None unless all come from the same scenes)."""
        first = origins[0]
        if any(o.scenes is not first.scenes or o.size != first.size for o in origins):
            return None
        return dataclasses.replace(first, split=torch.cat([o.split for o in origins]),
                                   image=torch.cat([o.image for o in origins]), box=torch.cat([o.box for o in origins]))


@dataclass
class FaceCrops(ImageSet):
    """Face crops of scenes (:func:`face_crop_view`), each knowing its scene (:class:`CropOrigin`)."""

    origin: CropOrigin | None = None

    def subset(self, index: torch.Tensor | slice) -> "FaceCrops":
        """Returns the crops selected by a slice, an index tensor or a boolean mask, with their origins."""
        part = ImageSet.subset(self, index)
        origin = None if self.origin is None else self.origin.subset(index)
        return FaceCrops(**{f.name: getattr(part, f.name) for f in dataclasses.fields(ImageSet)}, origin=origin)


def release_crops(crops: FaceCrops, release: Callable[[ImageSet, int], torch.Tensor]) -> torch.Tensor:
    """Returns the crops as cut from their scenes after a mechanism: what a release shows of those faces.

    Args:
        crops: Clean face crops with their origin.
        release: ``(scenes, k) -> released uint8 scenes``: runs the mechanism over the scenes
            of ``crops.origin.scenes[k]`` that the crops need (each once, in scene order).

    Returns:
        uint8 crops of the same shape as ``crops.images``.
    """
    origin = crops.origin
    if origin is None:
        raise ValueError("face crops without an origin cannot be cut from released scenes")
    out = torch.empty(tuple(crops.images.shape), dtype=torch.uint8)
    for k, scenes in enumerate(origin.scenes):
        rows = (origin.split == k).nonzero().flatten()
        if len(rows):
            needed, local = torch.unique(origin.image[rows], return_inverse=True)
            released = release(scenes.subset(needed), k)
            out[rows] = crop_faces(released, local, origin.box[rows], origin.size)[0]
    return out


def keyed_version(sees_crops: bool) -> int:
    """Returns the face view's version a cell's key holds: :data:`VIEW_VERSION` where its adversaries see face crops.

    A cell whose adversaries see none keeps :data:`KEYED_WITHOUT_CROPS`, so a change to the
    crops makes new cells only of the benchmarks that attack them.
    """
    return VIEW_VERSION if sees_crops else KEYED_WITHOUT_CROPS


def has_face_table(clean: Splits) -> bool:
    """Whether the data holds a per-split face table with identities (what :func:`face_crop_view` needs)."""
    faces = clean.info.get("faces")
    return isinstance(faces, dict) and all(
        isinstance(faces.get(s), dict) and {"image", "identity", "box"} <= set(faces[s]) for s in clean.sets)


def face_crop_view(clean: Splits, released: Release, seed: int, size: int = 64) -> tuple[Splits, Release]:
    """Returns the clean and released face crops of a scene dataset, split by identity.

    Args:
        clean: The clean scenes (with a face table, see :func:`has_face_table`).
        released: Their release.
        seed: Seed of the division of identities.
        size: Side of the crops in pixels.

    Raises:
        BenchError: The data has no face table with identities.
    """
    if not has_face_table(clean):
        raise BenchError(f"{clean.dataset}: the data has no face table with identities (info['faces']), "
                         "so face adversaries cannot crop its faces")
    splits = distinct_splits(clean)
    tables = {s: clean.info["faces"][s] for s in splits}
    people = torch.unique(torch.cat([t["identity"] for t in tables.values()]))
    order = people[torch.randperm(len(people), generator=make_generator(seed, "face_crops", "identities"))]
    cut_train = int(round(len(order) * SHARES["train"]))
    cut_val = cut_train + int(round(len(order) * SHARES["val"]))
    group = {"train": order[:cut_train], "val": order[cut_train:cut_val], "test": order[cut_val:]}
    clean_crops, released_crops, scene_split = [], [], []
    for k, s in enumerate(splits):
        t = tables[s]
        crops, inner = crop_faces(clean[s].images, t["image"], t["box"], size)
        clean_crops.append((s, crops, inner))
        released_crops.append(crop_faces(released.splits[s].images, t["image"], t["box"], size)[0])
        scene_split.append(torch.full((len(t["image"]),), k, dtype=torch.int64))
    origin = CropOrigin(tuple(clean[s] for s in splits), torch.cat(scene_split),
                        torch.cat([tables[s]["image"] for s in splits]).long(),
                        torch.cat([tables[s]["box"] for s in splits]).float(), size)
    columns = [k for k in ("identity", *ATTRIBUTES) if all(k in t for t in tables.values())]
    everything = {key: torch.cat([tables[s][key] for s in splits]) for key in columns}
    images = torch.cat([c for _, c, _ in clean_crops])
    inner = torch.cat([b for _, _, b in clean_crops])
    released_images = torch.cat(released_crops)
    names = next(iter(clean.sets.values())).attr_names
    attributes = [a for a in ATTRIBUTES if a in everything]
    sets, released_sets = {}, {}
    for view, ids in group.items():
        index = torch.isin(everything["identity"], ids).nonzero().flatten()
        part = FaceCrops(images=images[index], labels=everything["identity"][index],
                         attrs={a: everything[a][index] for a in attributes},
                         attr_names={a: list(names[a]) for a in attributes if a in names},
                         boxes=[inner[i : i + 1] for i in index.tolist()], origin=origin.subset(index))
        sets[view] = part
        released_sets[view] = part.with_images(released_images[index])
    digest = content_digest(tables)
    fingerprint = content_key("face_crops", VIEW_VERSION, clean.fingerprint, digest, seed, size)
    info = {"source": f"face crops of {clean.dataset} ({size} px, margin {MARGIN})",
            "identities": {v: len(ids) for v, ids in group.items()},
            "faces": {v: len(s) for v, s in sets.items()}}
    view = Splits(f"{clean.dataset}/faces", sets, fingerprint, synthetic=clean.synthetic, info=info)
    release = dataclasses.replace(released, splits=dataclasses.replace(view, sets=released_sets),
                                  key=content_key("face_crops", VIEW_VERSION, released.key, digest, seed, size))
    return view, release


def distinct_splits(clean: Splits) -> list[str]:
    """Returns the splits in order, leaving out one whose images are an earlier split's (the same object)."""
    out: list[str] = []
    for split, images in clean.sets.items():
        if all(images is not clean.sets[s] for s in out):
            out.append(split)
    return out


def crop_faces(images: Any, image_index: torch.Tensor, boxes: torch.Tensor, size: int,
               batch: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
    """Cuts a square crop around every face box and resamples it to ``size`` (area averaging).

    Args:
        images: uint8 images [N, C, H, W] (a tensor or ``ShardedImages``).
        image_index: int64 [F]: the image each face is in.
        boxes: float32 [F, 4]: (x1, y1, x2, y2) pixels.
        size: Side of the crops.
        batch: Faces cut at a time.

    Returns:
        uint8 crops [F, C, size, size] and float32 [F, 4]: each face's box in its crop's pixels.
    """
    from torchvision.ops import roi_align

    side = (boxes[:, 2:] - boxes[:, :2]).max(dim=1).values * MARGIN
    centre = (boxes[:, :2] + boxes[:, 2:]) / 2
    squares = torch.cat([centre - side[:, None] / 2, centre + side[:, None] / 2], dim=1)
    scale = (size / side)[:, None]
    inner = (boxes - squares[:, :2].repeat(1, 2)) * scale
    out = []
    for start in range(0, len(image_index), batch):
        which = image_index[start : start + batch]
        unique, local = torch.unique(which, return_inverse=True)
        chunk = images[unique].float() if len(unique) else torch.zeros(0)
        rois = torch.cat([local[:, None].float(), squares[start : start + batch]], dim=1)
        crops = roi_align(chunk, rois, output_size=size, spatial_scale=1.0, sampling_ratio=-1, aligned=True)
        out.append(crops.round_().clamp_(0, 255).to(torch.uint8))
    channels = int(images.shape[1])
    crops = torch.cat(out) if out else torch.zeros(0, channels, size, size, dtype=torch.uint8)
    return crops, inner.float()
