"""CelebA read from its official layout: face identities for few-shot learning and face re-ID.

Identities with at least ``min_images`` images are split into identity-disjoint train, val
and test sets by a fixed seeded permutation (the few-shot protocol), or by the official
evaluation partition. Images are centre-cropped, resized and cached as uint8.
"""

from __future__ import annotations

import math
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from PIL import Image

from bench.core.registry import register_dataset
from bench.data.base import (
    Dataset,
    DataShape,
    ImageSet,
    Splits,
    SplitShape,
    SplitsSink,
    cached_sharded_splits,
    fingerprint,
    size_report,
    source_fingerprint,
)
from bench.data.classsplit import SHAPE_OPTIONS, count_test_classes
from bench.data.loaders._celeba_files import file_digest, find_file, find_images, read_pairs, read_table
from bench.data.options import hint
from bench.data.stored_size import survey
from bench.errors import BenchError
from bench.randomness.seeding import make_generator
from bench.system.cpus import usable_cpus

LOADER_VERSION = 2

IDENTITY = "identity_CelebA.txt"
ATTRIBUTES = "list_attr_celeba.txt"
PARTITION = "list_eval_partition.txt"
BBOX = "list_bbox_celeba.txt"
LANDMARKS = "list_landmarks_align_celeba.txt"
IMAGE_DIRS = {"aligned": "img_align_celeba", "wild": "img_celeba"}
SPLITS = ("train", "val", "test")

_DEFAULTS: dict[str, Any] = {
    "min_images": 30,
    "crop": "auto",
    "size": None,
    "split_fractions": (0.64, 0.16, 0.20),
    "split_by": "random",
    "max_classes": None,
    "per_class": None,
    "test_classes": None,
    "min_test_classes": None,
    "images": "aligned",
    "seed": 0,
}


@register_dataset("celeba")
class CelebA(Dataset):
    """CelebA identities with the 40 binary attributes, gender, age group and face boxes."""

    layout = (
        "<root>/celeba/ (or <root>/) with img_align_celeba/000001.jpg..., identity_CelebA.txt, "
        "list_attr_celeba.txt, list_eval_partition.txt, list_landmarks_align_celeba.txt (optional, face boxes), "
        "and img_celeba/ + list_bbox_celeba.txt for images=wild; annotation files may sit in Anno/ and Eval/"
    )
    version = LOADER_VERSION
    description = "CelebA faces (official layout), identity-disjoint splits of identities with >= min_images images"

    def load(self, root: Path | None, options: Mapping[str, Any], cache_dir: Path) -> Splits:
        """Selects identities and images, then decodes them (or reads them from the cache).

        Args:
            root: The data root holding ``celeba/`` or the CelebA files themselves.
            options: min_images, crop (centre crop side; default 176 for aligned images,
                the largest centred square for wild ones; None for the largest square),
                size (default: the crop's side, so the mechanism runs at the images' own
                size), split_fractions, split_by ("random" or "official"), max_classes,
                per_class, test_classes, min_test_classes (as ``folder``), images
                ("aligned" or "wild") and seed.
            cache_dir: Decoded splits are cached under ``cache_dir/celeba``.

        Raises:
            BenchError: An option is invalid, or a file is missing or malformed.
        """
        opts, files, names, identities, selection = self._select(root, options)
        used = sorted(k for k in files if k != "images" and files[k] is not None)
        key = fingerprint(
            "celeba",
            LOADER_VERSION,
            sorted(opts.items()),
            *[(k, file_digest(files[k])) for k in used],
            *["\n".join(selection[s]) for s in SPLITS],
            source_fingerprint([files["images"] / f for s in SPLITS for f in selection[s]]),  # type: ignore[operator]
        )
        sets, content, built = cached_sharded_splits(
            cache_dir, "celeba", key, _shard_builder(files, selection, dict(zip(names, identities)), opts))
        info = {
            "source": str(files["images"].parent),
            "image_folder": IMAGE_DIRS[opts["images"]],
            "options": opts,
            "n_ids": {s: int(t.labels.unique().numel()) for s, t in sets.items()},
            "n_images": {s: len(t) for s, t in sets.items()},
            "boxes": f"{built['box_source'] or 'none'}" + ("" if opts["images"] == "wild" else
                                                          " (list_bbox_celeba.txt describes the in-the-wild images; not used)"),
            "split": ("the official partition (list_eval_partition.txt)" if opts["split_by"] == "official" else
                      "random identity-disjoint (set task.data.split_by=official for list_eval_partition.txt)"),
            "images": built["images"],
        }
        return Splits(dataset=self.name, sets=sets, fingerprint=content, synthetic=False, info=info)

    def load_public(self, root: Path | None, options: Mapping[str, Any], cache_dir: Path) -> ImageSet | None:
        """Decodes public images: identities that are in no split (e.g. too few images), never released.

        As many images as the train split has (fewer if there are not so many), a seeded
        choice among every identity that no split uses; None when there are none.
        """
        opts, files, names, identities, selection = self._select(root, options)
        identity = dict(zip(names, identities))
        used = {identity[f] for s in SPLITS for f in selection[s]}
        pool = sorted(f for f, i in zip(names, identities) if i not in used)
        if not pool:
            return None
        g = make_generator(opts["seed"], "celeba", "public")
        chosen = sorted(pool[i] for i in torch.randperm(len(pool), generator=g)[: len(selection["train"])].tolist())
        picked = {"train": chosen, "val": [], "test": []}
        key = fingerprint("celeba-public", LOADER_VERSION, sorted(opts.items()), file_digest(files[IDENTITY]),
                          "\n".join(chosen), source_fingerprint([files["images"] / f for f in chosen]))  # type: ignore[operator]
        sets, _, _ = cached_sharded_splits(cache_dir, "celeba", key,
                                           _shard_builder(files, picked, identity, opts, ("train",)))
        return sets["train"]

    def inspect(self, root: Path | None, options: Mapping[str, Any]) -> DataShape:
        """Finds the files, selects identities and returns the splits' shapes (reads annotations only)."""
        _, _, names, identities, selection = self._select(root, options)
        identity = dict(zip(names, identities))
        return {s: SplitShape.of_labels([identity[f] for f in selection[s]]) for s in SPLITS}

    def _select(self, root: Path | None, options: Mapping[str, Any]):
        """Returns (options, files, image names, identities, split -> selected names).

        Raises:
            BenchError: Missing files, bad options, or no identity with enough images.
        """
        opts = resolve_options(options)
        files = self._locate(root, opts["images"])
        names, identities = read_pairs(files[IDENTITY], "identity")
        partition = dict(zip(*read_pairs(files[PARTITION], "partition")))
        selection = select(names, identities, partition, opts)
        if opts["size"] is None and any(selection.values()):  # the images' own size after the declared crop
            opts["size"] = opts["crop"] or _smallest_side(files["images"], selection)  # type: ignore[arg-type]
        if not any(selection.values()):
            counts = Counter(identities)
            most = max(counts.values()) if counts else 0
            raise BenchError(
                f"celeba: no identity has at least min_images={opts['min_images']} images in {files[IDENTITY]} "
                f"(the most any identity has is {most}; lower it with --set task.data.min_images=N)"
            )
        return opts, files, names, identities, selection

    def _locate(self, root: Path | None, images: str) -> dict[str, Path | None]:
        """Finds the image folder and annotation files; raises the missing-data error."""
        if root is None or not Path(root).is_dir():
            raise self.missing(root, "the CelebA data root")
        root = Path(root)
        folder = IMAGE_DIRS[images]
        bases = [b for b in (root / "celeba", root / "CelebA", root) if b.is_dir()]
        base = next((b for b in bases if find_file(b, IDENTITY) or find_images(b, folder)), bases[-1])
        files: dict[str, Path | None] = {"images": find_images(base, folder)}
        if files["images"] is None:
            raise self.missing(root, f"{folder}/")
        required = [IDENTITY, ATTRIBUTES, PARTITION] + ([BBOX] if images == "wild" else [])
        for name in required:
            files[name] = find_file(base, name)
            if files[name] is None:
                raise self.missing(root, name)
        if images == "aligned":
            files[LANDMARKS] = find_file(base, LANDMARKS)
        return files


def resolve_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Validates loader options and fills in defaults.

    Raises:
        BenchError: An option is unknown or out of range.
    """
    unknown = set(options) - set(_DEFAULTS)
    if unknown:
        raise BenchError(f"celeba: unknown option(s) {sorted(unknown)}{hint(sorted(unknown)[0], _DEFAULTS)}; "
                         f"valid: {sorted(_DEFAULTS)}")
    opts = {**_DEFAULTS, **options}
    if opts["crop"] == "auto":
        opts["crop"] = 176 if opts["images"] == "aligned" else None
    try:
        out = {
            "min_images": _positive(opts["min_images"], "min_images"),
            "crop": None if opts["crop"] is None else _positive(opts["crop"], "crop"),
            "size": None if opts["size"] is None else _positive(opts["size"], "size"),
            "split_fractions": tuple(float(f) for f in opts["split_fractions"]),
            "split_by": str(opts["split_by"]),
            **{k: None if opts[k] is None else _positive(opts[k], k) for k in SHAPE_OPTIONS},
            "images": str(opts["images"]),
            "seed": int(opts["seed"]),
        }
    except (TypeError, ValueError) as exc:
        raise BenchError(f"celeba: bad option value ({exc})") from None
    fractions = out["split_fractions"]
    if len(fractions) != 3 or min(fractions) < 0 or not math.isclose(sum(fractions), 1.0, abs_tol=1e-6):
        raise BenchError(f"celeba: split_fractions must be three fractions >= 0 summing to 1, got {fractions}")
    if out["split_by"] not in ("random", "official"):
        raise BenchError(f"celeba: split_by must be 'random' or 'official', got {out['split_by']!r}")
    if out["images"] not in IMAGE_DIRS:
        raise BenchError(f"celeba: images must be 'aligned' or 'wild', got {out['images']!r}")
    return out


def _positive(value: Any, name: str) -> int:
    number = int(value)
    if number < 1 or number != float(value):
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return number


def select(
    names: Sequence[str], identities: Sequence[int], partition: Mapping[str, int], opts: Mapping[str, Any]
) -> dict[str, list[str]]:
    """Chooses the identities and images of each split (deterministic given the options).

    Returns:
        Split name -> image file names, sorted.
    """
    by_id: dict[int, list[str]] = {}
    for name, identity in zip(names, identities):
        by_id.setdefault(identity, []).append(name)
    eligible = sorted(i for i, files in by_id.items() if len(files) >= opts["min_images"])
    seed = opts["seed"]
    order = torch.randperm(len(eligible), generator=make_generator(seed, "celeba", "identities")).tolist()
    chosen = [eligible[i] for i in order][: opts["max_classes"]]
    if opts["split_by"] == "official":
        groups = _official_groups(chosen, by_id, partition)
    else:
        groups = _random_groups(chosen, opts)
    out = {}
    for split, ids in zip(SPLITS, groups):
        files = [f for i in ids for f in _images_of(i, by_id[i], opts["per_class"], seed)]
        out[split] = sorted(files)
    return out


def _random_groups(chosen: list[int], opts: Mapping[str, Any]) -> list[list[int]]:
    fractions = opts["split_fractions"]
    n = len(chosen)
    n_train = round(n * fractions[0])
    n_val = min(round(n * fractions[1]), n - n_train)
    test = count_test_classes(n, n - n_train - n_val, fractions, opts, "celeba")
    if test != n - n_train - n_val:
        rest = (fractions[0] + fractions[1]) or 1.0
        n_train = min(round((n - test) * fractions[0] / rest), n - test)
        n_val = n - test - n_train
    return [chosen[:n_train], chosen[n_train : n_train + n_val], chosen[n_train + n_val :]]


def _official_groups(chosen: list[int], by_id: Mapping[int, list[str]], partition: Mapping[str, int]):
    groups: list[list[int]] = [[], [], []]
    for identity in chosen:
        votes = Counter(partition.get(f, -1) for f in by_id[identity])
        part, _ = max(votes.items(), key=lambda kv: (kv[1], -kv[0]))
        if part not in (0, 1, 2):
            raise BenchError(f"celeba: {PARTITION} lacks a valid partition (0, 1, 2) for identity {identity}")
        groups[part].append(identity)
    return groups


def _images_of(identity: int, files: list[str], per_class: int | None, seed: int) -> list[str]:
    files = sorted(files)
    if per_class is None or len(files) <= per_class:
        return files
    pick = torch.randperm(len(files), generator=make_generator(seed, "celeba", "images", identity))[:per_class]
    return [files[i] for i in sorted(pick.tolist())]


def _build(
    files: Mapping[str, Path | None],
    selection: Mapping[str, list[str]],
    identity: Mapping[str, int],
    opts: Mapping[str, Any],
) -> dict[str, Any]:
    wanted = [f for s in SPLITS for f in selection[s]]
    attr_names, attr_values = read_table(files[ATTRIBUTES], wanted)  # type: ignore[arg-type]
    if not np.isin(attr_values, (-1, 1)).all():
        raise BenchError(f"celeba: {files[ATTRIBUTES]}: attribute values must be -1 or 1")
    native_boxes, source = _native_boxes(files, wanted, opts)  # annotations fail before the decoding
    images, sizes = decode(files["images"], wanted, opts["crop"], opts["size"])  # type: ignore[arg-type]
    cropped = np.array([_crop_box(w, h, opts["crop"])[2:][::-1] for w, h in sizes]).reshape(-1, 2)
    report = size_report(sizes[:, ::-1], cropped, (opts["size"], opts["size"]))
    boxes = None
    if native_boxes is not None:
        boxes = torch.from_numpy(_transform_boxes(native_boxes, sizes, opts["crop"], opts["size"])).float()
    positive = torch.from_numpy((attr_values > 0).astype(np.int64))
    attrs = {name.lower(): positive[:, j].contiguous() for j, name in enumerate(attr_names)}
    if "male" in attrs:
        attrs["gender"] = attrs["male"].clone()
    if "young" in attrs:
        attrs["age_group"] = 1 - attrs["young"]
    bounds, lo = {}, 0
    for s in SPLITS:
        bounds[s] = (lo, lo + len(selection[s]))
        lo += len(selection[s])
    labels = torch.tensor([identity[f] for f in wanted], dtype=torch.int64)
    return {"images": images, "labels": labels, "attrs": attrs, "boxes": boxes, "box_source": source, "bounds": bounds,
            "sizes": report}


def _smallest_side(folder: Path, selection: Mapping[str, list[str]]) -> int:
    """The shortest side of the selected images (headers only): the largest square every one of them holds."""
    found = survey((f, folder / f) for s in SPLITS for f in selection[s])
    return int(found.natives.min())


def _crop_box(width: int, height: int, crop: int | None) -> tuple[int, int, int, int]:
    """The centre crop (left, top, crop width, crop height), clamped to the image."""
    side_w = min(width, height) if crop is None else min(crop, width)
    side_h = min(width, height) if crop is None else min(crop, height)
    return int(round((width - side_w) / 2.0)), int(round((height - side_h) / 2.0)), side_w, side_h


def decode(folder: Path, names: Sequence[str], crop: int | None, size: int) -> tuple[torch.Tensor, np.ndarray]:
    """Decodes, centre-crops and resizes images into one preallocated uint8 tensor.

    Args:
        folder: The image folder.
        names: Image file names, in output order.
        crop: Side of the centre crop (clamped to the image), or None for the largest square.
        size: Output side (bilinear, antialiased resize).

    Returns:
        uint8 images [N, 3, size, size] and the original (width, height) of each image.

    Raises:
        BenchError: An image is missing or cannot be decoded.
    """
    out = torch.empty(len(names), 3, size, size, dtype=torch.uint8)
    sizes = np.zeros((len(names), 2), dtype=np.int64)

    def work(i: int) -> None:
        path = folder / names[i]
        try:
            with Image.open(path) as img:
                rgb = img.convert("RGB")
        except (OSError, ValueError) as exc:
            raise BenchError(f"celeba: cannot read image {path}: {exc}") from None
        sizes[i] = rgb.size
        left, top, w, h = _crop_box(*rgb.size, crop)
        rgb = rgb.crop((left, top, left + w, top + h)).resize((size, size), Image.BILINEAR)
        out[i] = torch.from_numpy(np.array(rgb)).permute(2, 0, 1)

    with ThreadPoolExecutor(max_workers=min(8, usable_cpus())) as pool:
        for _ in pool.map(work, range(len(names))):
            pass
    return out, sizes


def _native_boxes(files: Mapping[str, Path | None], wanted: list[str], opts: Mapping[str, Any]):
    """Face boxes (x1, y1, x2, y2) in original pixels and their source, or (None, None).

    Wild images use the bbox file, aligned ones the landmarks.
    """
    if opts["images"] == "wild":
        _, raw = read_table(files[BBOX], wanted, columns=4)  # type: ignore[arg-type]
        if (raw[:, 2:] <= 0).any():
            raise BenchError(f"celeba: {files[BBOX]}: box widths and heights must be positive")
        boxes, source = np.concatenate([raw[:, :2], raw[:, :2] + raw[:, 2:]], 1).astype(np.float64), "bbox"
    elif files.get(LANDMARKS) is not None:
        _, marks = read_table(files[LANDMARKS], wanted, columns=10)  # type: ignore[arg-type]
        boxes, source = landmark_boxes(marks), "landmarks"
    else:
        return None, None
    return boxes, source


def landmark_boxes(marks: np.ndarray) -> np.ndarray:
    """Face boxes [N, 4] (x1, y1, x2, y2) around the 5 landmarks, enlarged to the whole face.

    The box is sized by the larger of the eye distance and 0.9x the eye-to-mouth distance
    (robust to yaw), 2.4 of that wide, from 1.2 above the eyes to 0.7 below the mouth.
    """
    xy = marks.reshape(-1, 5, 2).astype(np.float64)
    eyes, mouth = xy[:, :2].mean(1), xy[:, 3:].mean(1)
    eye_dist = np.linalg.norm(xy[:, 1] - xy[:, 0], axis=1)
    scale = np.maximum(eye_dist, 0.9 * (mouth[:, 1] - eyes[:, 1]))
    cx = (eyes[:, 0] + mouth[:, 0]) / 2
    return np.stack([cx - 1.2 * scale, eyes[:, 1] - 1.2 * scale, cx + 1.2 * scale, mouth[:, 1] + 0.7 * scale], 1)


def _transform_boxes(boxes: np.ndarray, sizes: np.ndarray, crop: int | None, size: int) -> np.ndarray:
    """Maps boxes from original pixels through the centre crop and resize, clipped to the image."""
    out = np.empty_like(boxes)
    for i, (width, height) in enumerate(sizes):
        left, top, w, h = _crop_box(int(width), int(height), crop)
        out[i, 0::2] = (boxes[i, 0::2] - left) * (size / w)
        out[i, 1::2] = (boxes[i, 1::2] - top) * (size / h)
    return np.clip(out, 0, size)


def _shard_builder(files, selection, identity, opts, splits: Sequence[str] = SPLITS):
    """Returns the build function of :func:`cached_sharded_splits`: decode, then write the splits."""

    def build(sink: SplitsSink) -> dict[str, Any]:
        data = _build(files, selection, identity, opts)
        for split in splits:
            sink.put(split, _image_set(data, split))
        return {"box_source": data["box_source"], "images": data["sizes"]}

    return build


def _image_set(data: Mapping[str, Any], split: str) -> ImageSet:
    lo, hi = data["bounds"][split]
    attrs = {k: v[lo:hi] for k, v in data["attrs"].items()}
    names = {k: ["no", "yes"] for k in attrs}
    names.update({"gender": ["female", "male"], "age_group": ["young", "not young"]})
    boxes = None if data["boxes"] is None else list(data["boxes"][lo:hi].unsqueeze(1).unbind(0))
    return ImageSet(
        images=data["images"][lo:hi],
        labels=data["labels"][lo:hi],
        attrs=attrs,
        attr_names={k: names[k] for k in attrs},
        boxes=boxes,
    )
