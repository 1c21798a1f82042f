"""Options and class-disjoint splits shared by the loaders of labelled image collections.

``folder``, ``hf`` and ``omniglot`` take the same options for what they store (``size``,
``grey``) and how they shape and split classes (``min_images``, ``split_fractions``,
``seed``, ``max_classes``, ``per_class``, ``test_classes``, ``min_test_classes``; every
loader names these the same, :data:`SHAPE_OPTIONS`); :func:`split_classes` makes the
class-disjoint, seeded train / val / test split, :func:`cap_per_class` the per-class image
cap, and :func:`code_values` turns annotation values into attribute codes.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from bench.data.options import check_option_names
from bench.errors import BenchError
from bench.randomness.seeding import make_generator

SPLITS = ("train", "val", "test")
COMMON_DEFAULTS: dict[str, Any] = {
    "size": None,
    "min_images": 2,
    "split_fractions": (0.64, 0.16, 0.20),
    "seed": 0,
    "max_classes": None,
    "per_class": None,
    "test_classes": None,
    "min_test_classes": None,
    "grey": None,
}
"""``size`` None: the images' own size (the mechanism runs on the pixels a user has)."""
CLASS_SPLIT_ONLY = ("test_classes", "min_test_classes")
"""Options of class-disjoint splits only: loaders that split every class by image (labelled_folder) have none."""
SHAPE_OPTIONS = ("max_classes", "per_class", *CLASS_SPLIT_ONLY)
"""The options that shape a labelled collection, one name in every loader: classes (people) used, images per
class, test classes exactly, and the fewest test classes a profile asks for."""


def parse_options(dataset: str, options: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """Validates loader options against a dataset's defaults and fills them in.

    ``size``, ``min_images``, ``max_classes``, ``per_class``, ``split_fractions``,
    ``seed``, ``grey`` and ``rotations`` are checked here; other options are returned as
    given (``none`` read as None) for the dataset to check.

    Raises:
        BenchError: An unknown option (naming the valid ones) or a bad value.
    """
    check_option_names(dataset, options, defaults)
    opts = {k: _none(options[k]) if k in options else v for k, v in defaults.items()}
    checks = {"size": parse_size, "min_images": _positive, "max_classes": _positive, "per_class": _positive,
              "test_classes": _positive, "min_test_classes": _positive, "seed": _integer,
              "split_fractions": _fractions, "grey": _grey, "rotations": _boolean}
    for key, check in checks.items():
        if key in opts and opts[key] is not None:
            try:
                opts[key] = check(opts[key])
            except (TypeError, ValueError) as exc:
                raise BenchError(f"{dataset}: option {key}: {exc}") from None
    for key in ("min_images", "seed", "split_fractions", "rotations"):
        if key in opts and opts[key] is None:
            raise BenchError(f"{dataset}: option {key} cannot be none")
    return opts


def _none(value: Any) -> Any:
    return None if isinstance(value, str) and value.strip().lower() in ("none", "null", "") else value


def parse_size(value: Any) -> tuple[int, int]:
    """Parses a stored size: one side (square), ``[height, width]`` or ``"HxW"``."""
    if isinstance(value, str):
        value = [int(p) for p in value.lower().replace("x", ",").split(",") if p.strip()]
    parts = [value] if not isinstance(value, (list, tuple)) else list(value)
    if len(parts) not in (1, 2) or any(isinstance(p, bool) or int(p) != p or int(p) < 1 for p in parts):
        raise ValueError(f"expected a positive side or [height, width], got {value!r}")
    return int(parts[0]), int(parts[-1])


def _positive(value: Any) -> int:
    if isinstance(value, bool) or int(value) != value or int(value) < 1:
        raise ValueError(f"expected a positive integer, got {value!r}")
    return int(value)


def _integer(value: Any) -> int:
    if isinstance(value, bool) or int(value) != value:
        raise ValueError(f"expected an integer, got {value!r}")
    return int(value)


def _boolean(value: Any) -> bool:
    if isinstance(value, str) and value.strip().lower() in ("true", "yes", "1", "false", "no", "0"):
        return value.strip().lower() in ("true", "yes", "1")
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def _grey(value: Any) -> bool | None:
    """``grey``: true or false overrides; ``auto`` (or none) detects it from the images."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return None
    return _boolean(value)


def _fractions(value: Any) -> tuple[float, float, float]:
    if isinstance(value, str):
        value = value.split(",")
    parts = tuple(float(v) for v in value)
    if len(parts) != 3 or min(parts) < 0 or not math.isclose(sum(parts), 1.0, abs_tol=1e-6):
        raise ValueError(f"expected three fractions (train, val, test) >= 0 summing to 1, got {value!r}")
    return parts


def split_classes(counts: Mapping[Any, int], opts: Mapping[str, Any], dataset: str) -> dict[str, list[Any]]:
    """Splits the classes with at least ``min_images`` images into class-disjoint train / val / test.

    The eligible classes, sorted, are permuted by a generator seeded from ``seed``, cut to
    ``max_classes``, and divided by ``split_fractions`` (largest remainders; every split
    with a positive fraction gets at least one class). ``test_classes`` fixes the test
    split's size; ``min_test_classes`` (what a profile asks for) raises it to that many
    where at least as many classes stay for train and val (a smaller collection keeps its
    fractions: the face adversaries then fold over every identity). Train and val share
    the rest in their fractions' proportion.

    Returns:
        Split -> its classes, sorted.

    Raises:
        BenchError: Fewer eligible classes than splits to fill (naming min_images), or a
            ``test_classes`` that leaves a split with a positive fraction empty.
    """
    eligible = sorted(c for c, n in counts.items() if n >= opts["min_images"])
    fractions = opts["split_fractions"]
    needed = sum(f > 0 for f in fractions)
    if len(eligible) < needed:
        most = max(counts.values(), default=0)
        raise BenchError(f"{dataset}: {len(eligible)} class(es) have at least min_images={opts['min_images']} images "
                         f"but the splits need {needed} (the most any class has is {most}; lower it with "
                         f"--set task.data.min_images=N, or add images)")
    order = torch.randperm(len(eligible), generator=make_generator(opts["seed"], dataset, "classes")).tolist()
    chosen = [eligible[i] for i in order][: opts["max_classes"]]
    sizes = _allocate(len(chosen), fractions)
    test = count_test_classes(len(chosen), sizes[2], fractions, opts, dataset)
    if test != sizes[2]:
        rest = (fractions[0] + fractions[1]) or 1.0
        sizes = [*_allocate(len(chosen) - test, [fractions[0] / rest, fractions[1] / rest, 0.0])[:2], test]
    out, start = {}, 0
    for split, n in zip(SPLITS, sizes):
        out[split] = sorted(chosen[start : start + n])
        start += n
    return out


def count_test_classes(n: int, share: int, fractions: Sequence[float], opts: Mapping[str, Any], dataset: str
                       ) -> int:
    """Returns how many of ``n`` classes go to test: ``test_classes``, else ``min_test_classes`` where half remain.

    Raises:
        BenchError: ``test_classes`` leaves too few classes for train (and val, where its fraction is positive).
    """
    others = sum(f > 0 for f in fractions[:2])
    exact, floor = opts.get("test_classes"), opts.get("min_test_classes")
    if exact is not None:
        if exact > n - others:
            raise BenchError(f"{dataset}: test_classes={exact} leaves {n - exact} of the {n} classes for train and "
                             f"val, which need {others}; lower task.data.test_classes")
        return int(exact)
    if floor is not None and share < floor <= n - max(floor, others):  # at least half stays for train and val
        return int(floor)
    return share


def cap_per_class(files: Mapping[Any, Sequence[str]], per_class: int | None, seed: int, dataset: str
                  ) -> dict[Any, list[str]]:
    """Keeps at most ``per_class`` images of each class: a seeded choice per class, in the class's own order.

    Returns:
        Class -> its kept images (the lists themselves, as lists, when ``per_class`` is None or they fit).
    """
    out = {}
    for name, members in files.items():
        members = list(members)
        if per_class is not None and len(members) > per_class:
            g = make_generator(seed, dataset, "per_class", str(name))
            keep = sorted(torch.randperm(len(members), generator=g)[:per_class].tolist())
            members = [members[i] for i in keep]
        out[name] = members
    return out


def cap_groups(groups: Mapping[str, list[Any]], max_classes: int | None, seed: int, dataset: str
               ) -> dict[str, list[Any]]:
    """Keeps at most ``max_classes`` classes of fixed split lists, in proportion to the lists' sizes.

    Each list keeps its share (largest remainders; a non-empty list keeps at least one
    class), chosen by a generator seeded from ``seed`` and the split's name.

    Returns:
        Split -> its kept classes, sorted (the lists themselves when they fit).
    """
    total = sum(len(groups[s]) for s in SPLITS)
    if max_classes is None or total <= max_classes:
        return {s: sorted(groups[s]) for s in SPLITS}
    sizes = _allocate(max_classes, [len(groups[s]) / total for s in SPLITS])
    out = {}
    for split, n in zip(SPLITS, sizes):
        members = sorted(groups[split])
        order = torch.randperm(len(members), generator=make_generator(seed, dataset, "cap", split)).tolist()
        out[split] = sorted(members[i] for i in order[:n])
    return out


def _allocate(n: int, fractions: Sequence[float]) -> list[int]:
    raw = [n * f for f in fractions]
    sizes = [math.floor(r) for r in raw]
    for i in sorted(range(3), key=lambda i: raw[i] - sizes[i], reverse=True)[: n - sum(sizes)]:
        sizes[i] += 1
    for i in range(3):
        if fractions[i] > 0 and sizes[i] == 0:
            sizes[max(range(3), key=lambda j: sizes[j])] -= 1
            sizes[i] = 1
    return sizes


def code_values(values: Sequence[Any]) -> tuple[list[int], list[str]]:
    """Codes categorical values: names sorted (numbers numerically), None or "" -> -1.

    Returns:
        The code of each value and the names of the codes.
    """
    present = {v for v in values if v is not None and v != ""}
    if all(isinstance(v, (bool, np.bool_)) for v in present):
        present_sorted = sorted(present)
    elif all(_is_number(v) for v in present):
        present_sorted = sorted(present, key=float)
    else:
        present_sorted = sorted(present, key=str)
    index = {v: i for i, v in enumerate(present_sorted)}
    return [index.get(v, -1) if v is not None and v != "" else -1 for v in values], [str(v) for v in present_sorted]


def _is_number(v: Any) -> bool:
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return True
    try:
        return isinstance(v, str) and str(int(v.strip())) == v.strip().lstrip("+")
    except ValueError:
        return False
