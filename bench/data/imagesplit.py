"""Splits of labelled images for classification: the same classes in every split, split by image.

Used by ``labelled_folder`` and ``labelled_hf`` (classification on a user's data). The rule,
recorded in the loaded data's ``info["split"]``:

- the data's own splits when it has ``train`` and ``val`` or ``test`` (``split: auto`` or
  ``dataset``): with ``train`` / ``val`` / ``test`` all present they are used as they are;
  with ``train`` and ``val`` only, ``val`` is the test split (as ILSVRC's validation set
  serves as its test set) and a val split is carved out of ``train``; with ``train`` and
  ``test`` only, val is carved out of ``train``. Carving takes ``val / (train + val)`` of
  ``split_fractions`` of each class's train images, by a seeded permutation per class;
- otherwise (``split: images``, or no own splits) every class's images are split by a
  seeded permutation per class (stratified) in the proportions ``split_fractions``
  (largest remainders; every split with a positive fraction gets an image when the class
  has enough).

Classes are those with at least ``min_images`` train images (the first ``max_classes`` in
sorted order), relabelled 0..K-1; images of other classes are left out and counted.
``per_class`` keeps at most that many images of each class (a seeded choice per class,
before the split), as in every loader.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch

from bench.data.classsplit import cap_per_class
from bench.errors import BenchError
from bench.randomness.seeding import make_generator

SPLITS = ("train", "val", "test")
SPLIT_RULES = ("auto", "dataset", "images")


@dataclass
class ImageSplit:
    """Each image's split and label over the kept classes.

    Attributes:
        split_of: Each image's split ("" when it is left out).
        labels: Each image's label 0..K-1 over the kept classes (-1 when left out).
        classes: The kept classes' keys, in label order.
        how: The rule that made the split, in words.
        left_out: Images left out (their class has too few train images, is beyond
            ``max_classes``, or is absent from train).
    """

    split_of: list[str]
    labels: list[int]
    classes: list[Any]
    how: str
    left_out: int


def allocate(n: int, fractions: Sequence[float]) -> list[int]:
    """Splits n items by fractions (largest remainders); each positive fraction gets one item when n allows."""
    raw = [n * f for f in fractions]
    sizes = [math.floor(r) for r in raw]
    for i in sorted(range(len(raw)), key=lambda i: raw[i] - sizes[i], reverse=True)[: n - sum(sizes)]:
        sizes[i] += 1
    for i, f in enumerate(fractions):
        if f > 0 and sizes[i] == 0 and max(sizes) > 1:
            sizes[max(range(len(sizes)), key=lambda j: sizes[j])] -= 1
            sizes[i] = 1
    return sizes


def split_images(own: Sequence[str], keys: Sequence[Any], opts: Mapping[str, Any], dataset: str) -> ImageSplit:
    """Assigns every image a split and a label (see the module docstring).

    Args:
        own: Each image's split in the data itself (``train``, ``val``, ``test``, or "").
        keys: Each image's class (any sortable key; None: unlabelled, left out).
        opts: ``split`` (auto, dataset, images), ``split_fractions``, ``seed``,
            ``min_images``, ``max_classes``, ``per_class``.
        dataset: The loader's name, for messages and seeds.

    Raises:
        BenchError: ``split: dataset`` without own train and val/test splits, or fewer than
            two classes with ``min_images`` train images (the message names the setting).
    """
    keys = _cap_images(keys, opts.get("per_class"), opts["seed"], dataset)
    present = {s for s in own if s}
    has_own = "train" in present and bool(present & {"val", "test"})
    if opts["split"] == "dataset" and not has_own:
        raise BenchError(f"{dataset}: split=dataset, but the data has no train and val or test splits (found: "
                         f"{', '.join(sorted(present)) or 'none'}); use split=images to split every class's images")
    f_train, f_val, f_test = opts["split_fractions"]
    if f_train <= 0:
        raise BenchError(f"{dataset}: split_fractions must give train a positive fraction, got {opts['split_fractions']}")
    if has_own and opts["split"] != "images":
        split_of = [s if s in SPLITS else "" for s in own]
        if "test" not in present:
            split_of = ["test" if s == "val" else s for s in split_of]
            how = "the data's own train / val splits (val is the test split; val carved out of train)"
        elif "val" not in present:
            how = "the data's own train / test splits (val carved out of train)"
        else:
            how = "the data's own train / val / test splits"
        if "val" not in present or "test" not in present:
            share = f_val / (f_train + f_val) if f_val > 0 else 0.0
            split_of = _stratify(split_of, keys, ("train", "val"), (1 - share, share), opts["seed"], dataset, "train")
    else:
        why = "split=images" if opts["split"] == "images" else "the data has no train and val/test splits"
        split_of = _stratify([""] * len(keys), keys, SPLITS, opts["split_fractions"], opts["seed"], dataset, None)
        how = (f"stratified by class, seed {opts['seed']}, fractions {', '.join(f'{f:g}' for f in opts['split_fractions'])}"
               f" ({why})")
    return _keep_classes(split_of, keys, opts, dataset, how)


def _cap_images(keys: Sequence[Any], per_class: int | None, seed: int, dataset: str) -> list[Any]:
    """Returns the keys with all but ``per_class`` images of each class (a seeded choice) set to None (left out)."""
    keys = list(keys)
    if per_class is None:
        return keys
    by_class: dict[Any, list[str]] = {}
    for i, key in enumerate(keys):
        if key is not None:
            by_class.setdefault(key, []).append(str(i))
    kept = {int(i) for members in cap_per_class(by_class, per_class, seed, dataset).values() for i in members}
    return [key if i in kept else None for i, key in enumerate(keys)]


def _stratify(split_of: list[str], keys: Sequence[Any], names: Sequence[str], fractions: Sequence[float],
              seed: int, dataset: str, within: str | None) -> list[str]:
    """Re-splits the images in split ``within`` (None: every labelled image) class by class by ``fractions``."""
    by_class: dict[Any, list[int]] = {}
    for i, key in enumerate(keys):
        if key is not None and (within is None or split_of[i] == within):
            by_class.setdefault(key, []).append(i)
    out = list(split_of)
    for key, members in sorted(by_class.items()):
        g = make_generator(seed, dataset, "images", within or "all", str(key))
        order = [members[j] for j in torch.randperm(len(members), generator=g).tolist()]
        start = 0
        for name, n in zip(names, allocate(len(order), fractions)):
            for i in order[start:start + n]:
                out[i] = name
            start += n
    return out


def _keep_classes(split_of: list[str], keys: Sequence[Any], opts: Mapping[str, Any], dataset: str,
                  how: str) -> ImageSplit:
    train: dict[Any, int] = {}
    for s, key in zip(split_of, keys):
        if s == "train" and key is not None:
            train[key] = train.get(key, 0) + 1
    kept = sorted(k for k, n in train.items() if n >= opts["min_images"])[: opts["max_classes"]]
    if len(kept) < 2:
        most = max(train.values(), default=0)
        raise BenchError(f"{dataset}: {len(kept)} class(es) have at least min_images={opts['min_images']} train "
                         f"images (the most any class has is {most}); a classifier needs 2 (lower it with "
                         "--set task.data.min_images=N, or add images)")
    label = {k: i for i, k in enumerate(kept)}
    out_split = [s if s and key in label else "" for s, key in zip(split_of, keys)]
    labels = [label[key] if s else -1 for s, key in zip(out_split, keys)]
    for name in ("train", "test"):
        if name not in out_split:
            raise BenchError(f"{dataset}: the {name} split has no image of the kept classes (add images, or change "
                             "--set task.data.split_fractions=TRAIN,VAL,TEST)")
    return ImageSplit(out_split, labels, kept, how, sum(1 for s in out_split if not s))
