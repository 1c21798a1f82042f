"""CIFAR-10 (Krizhevsky, 2009) read from its official python layout, for DP training and membership inference.

The data root holds ``cifar-10-batches-py/`` as the official ``cifar-10-python.tar.gz``
unpacks: ``data_batch_1`` .. ``data_batch_5`` (10,000 training images each),
``test_batch`` (10,000 test images) and ``batches.meta`` (the class names). Each batch is
a pickled dict whose ``b"data"`` is a uint8 array [10000, 3072] (per image the 1024
red, then green, then blue values of a 32 x 32 image, row-major) and whose ``b"labels"``
holds the class ids 0..9.

The 50,000 training images are divided into disjoint ``train`` (the model's training
records: the membership "members"), ``val`` (model selection) and ``population`` (the
adversary's data for reference models, from the same distribution) by a seeded,
class-stratified order: ``train`` is its first ``n_train`` images, ``val`` the next
``n_val``, ``population`` the next ``n_population``. ``test`` (utility, and the
membership "non-members") is ``n_test`` images of ``test_batch`` chosen the same way
(all of it by default). Every split keeps its images in file order.

The batches are pickles, and data roots can be shared, so they are read by an unpickler
that builds nothing but plain containers and numpy arrays (:class:`BatchUnpickler`): a
file that names anything else is refused before anything of it runs.
"""

from __future__ import annotations

import codecs
import functools
import pickle
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from bench.core.registry import register_dataset
from bench.data import imageread
from bench.data.base import (
    Dataset,
    DataShape,
    ImageSet,
    Splits,
    SplitShape,
    cached_sharded_splits,
    fingerprint,
    size_report,
    source_fingerprint,
)
from bench.data.options import check_option_names
from bench.errors import BenchError
from bench.randomness.seeding import make_generator

LOADER_VERSION = 1
FOLDER = "cifar-10-batches-py"
BASES = (FOLDER, f"cifar10/{FOLDER}", f"cifar-10/{FOLDER}", f"CIFAR10/{FOLDER}", "")
TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILE = "test_batch"
META_FILE = "batches.meta"
FILES = (*TRAIN_FILES, TEST_FILE, META_FILE)
SIDE = 32
PIXELS = 3 * SIDE * SIDE
N_CLASSES = 10
OFFICIAL_TRAIN = 50_000
OFFICIAL_TEST = 10_000
CLASS_NAMES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
SPLITS = ("train", "val", "test", "population")
POOL_SPLITS = ("train", "val", "population")
"""The splits cut from the training batches, in the order they are cut."""
DEFAULTS: dict[str, Any] = {"n_train": 25_000, "n_val": 5_000, "n_population": 20_000, "n_test": 10_000, "seed": 0}


class BatchUnpickler(pickle.Unpickler):
    """An unpickler that builds only what a CIFAR batch holds: containers, bytes, numbers and numpy arrays.

    Every global a pickle names is looked up in a fixed table of numpy's array and dtype
    reconstructors (the names numpy 1 and numpy 2 write) and ``_codecs.encode`` for
    latin-1 (how Python 3 writes bytes at protocol 2); any other name (``os.system``,
    ``builtins.eval``, ...) raises :class:`pickle.UnpicklingError` before it is imported
    or called.
    """

    def find_class(self, module: str, name: str) -> Any:
        """Returns the allowed object a pickle names.

        Raises:
            pickle.UnpicklingError: The name is not one a CIFAR batch uses.
        """
        found = _allowed().get((module, name))
        if found is None:
            raise pickle.UnpicklingError(f"refused global {module}.{name}")
        return found


@functools.lru_cache(maxsize=1)
def _allowed() -> dict[tuple[str, str], Any]:
    try:
        from numpy._core import multiarray, numeric
    except ImportError:  # numpy 1
        from numpy.core import multiarray, numeric  # type: ignore[no-redef]

    table: dict[tuple[str, str], Any] = {
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("_codecs", "encode"): _latin1_encode,
        ("builtins", "bytearray"): bytearray,
    }
    for package in ("numpy.core", "numpy._core"):
        table[(f"{package}.multiarray", "_reconstruct")] = multiarray._reconstruct
        table[(f"{package}.multiarray", "scalar")] = multiarray.scalar
        table[(f"{package}.numeric", "_frombuffer")] = numeric._frombuffer
    return table


def _latin1_encode(obj: str, encoding: str = "utf-8", errors: str = "strict") -> bytes:
    if str(encoding).lower().replace("_", "-") not in ("latin1", "latin-1", "iso-8859-1"):
        raise pickle.UnpicklingError(f"refused _codecs.encode with encoding {encoding!r}")
    return codecs.encode(obj, "latin1", errors)


def read_pickle(path: Path) -> Any:
    """Reads a pickle with :class:`BatchUnpickler` (``encoding="bytes"``, as the batches were written by Python 2).

    Raises:
        BenchError: The file cannot be read, is not a pickle, or names something a CIFAR
            batch never does (then nothing of it ran).
    """
    try:
        with open(path, "rb") as f:
            return BatchUnpickler(f, encoding="bytes").load()
    except OSError as exc:
        raise BenchError(f"cifar10: cannot read {path}: {exc.strerror or exc}") from None
    except pickle.UnpicklingError as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else "not a pickle"
        if reason.startswith("refused"):
            reason += " without running it"
        raise BenchError(f"cifar10: {path} is not a CIFAR-10 batch ({reason})") from None
    except Exception as exc:  # noqa: BLE001 - a corrupt pickle raises anything (EOFError, ValueError, ...)
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise BenchError(f"cifar10: {path} is not a CIFAR-10 batch (unreadable pickle: "
                         f"{type(exc).__name__}{': ' + reason if reason else ''})") from None


def _field(d: Mapping[Any, Any], key: str) -> Any:
    if key.encode() in d:
        return d[key.encode()]
    return d.get(key)


def read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Reads one data batch: images uint8 [N, 3, 32, 32] and labels int64 [N].

    Raises:
        BenchError: The file is not a CIFAR-10 batch (the message names it and what is wrong).
    """
    d = read_pickle(path)

    def bad(what: str) -> BenchError:
        return BenchError(f"cifar10: {path} is not a CIFAR-10 batch ({what})")

    if not isinstance(d, dict):
        raise bad(f"a pickled {type(d).__name__}, expected a dict with b'data' and b'labels'")
    data, labels = _field(d, "data"), _field(d, "labels")
    if data is None or labels is None:
        raise bad("no b'data' or no b'labels' entry")
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != PIXELS:
        shape = getattr(data, "shape", None)
        raise bad(f"b'data' is {type(data).__name__} {getattr(data, 'dtype', '')} {shape}, "
                  f"expected uint8 [N, {PIXELS}]")
    try:
        y = np.asarray(labels)
        if y.dtype == object or y.dtype.kind not in "iu" or y.ndim != 1:
            raise ValueError
        y = y.astype(np.int64)
    except (TypeError, ValueError):
        raise bad("b'labels' is not a list of integers") from None
    if len(y) != len(data):
        raise bad(f"{len(data)} images but {len(y)} labels")
    if len(y) and (y.min() < 0 or y.max() >= N_CLASSES):
        raise bad(f"labels must be class ids 0..{N_CLASSES - 1}, found {int(y.min())}..{int(y.max())}")
    return np.ascontiguousarray(data).reshape(len(data), 3, SIDE, SIDE), y


def read_class_names(path: Path) -> list[str]:
    """Reads ``batches.meta``: the ten class names.

    Raises:
        BenchError: The file is not CIFAR-10's ``batches.meta``.
    """
    d = read_pickle(path)
    names = _field(d, "label_names") if isinstance(d, dict) else None
    if not isinstance(names, (list, tuple)) or len(names) != N_CLASSES:
        raise BenchError(f"cifar10: {path} is not CIFAR-10's batches.meta (expected b'label_names', "
                         f"a list of {N_CLASSES} names)")
    return [n.decode("utf-8", "replace") if isinstance(n, bytes) else str(n) for n in names]


def stratified_order(labels: np.ndarray, generator: torch.Generator) -> np.ndarray:
    """Returns a seeded order of the indices whose every range is class-stratified.

    Each class's images are shuffled; the image of rank ``r`` among ``n_c`` of its class
    gets the key ``(r + 0.5) / n_c``, ties broken by a seeded order of the classes. Sorted
    by key, any consecutive range holds each class in proportion to its size (equal-sized
    classes: counts that differ by at most one).

    Args:
        labels: int64 [N] class ids.
        generator: Draws the shuffle and the class order.

    Returns:
        int64 [N], a permutation of ``0 .. N-1``.
    """
    n = len(labels)
    perm = torch.randperm(n, generator=generator).numpy()
    tie = torch.randperm(N_CLASSES, generator=generator).numpy()
    shuffled = labels[perm]
    rank = np.zeros(n, dtype=np.float64)
    size = np.ones(n, dtype=np.float64)
    for c in range(N_CLASSES):
        where = np.nonzero(shuffled == c)[0]
        rank[where] = np.arange(len(where))
        size[where] = max(len(where), 1)
    order = np.lexsort((tie[shuffled], (rank + 0.5) / size))
    return perm[order]


def assign(train_labels: np.ndarray, test_labels: np.ndarray, opts: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Picks each split's images: split -> sorted indices into the training (or, for test, the test) images.

    Args:
        train_labels: Labels of the concatenated training batches.
        test_labels: Labels of the test batch.
        opts: Resolved options (sizes and seed).
    """
    order = stratified_order(train_labels, make_generator(opts["seed"], "cifar10", "train-pool"))
    out, start = {}, 0
    for split in POOL_SPLITS:
        count = opts[f"n_{split}"]
        out[split] = np.sort(order[start : start + count])
        start += count
    test = stratified_order(test_labels, make_generator(opts["seed"], "cifar10", "test"))
    out["test"] = np.sort(test[: opts["n_test"]])
    return {s: out[s] for s in SPLITS}


def resolve_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Validates the options against the official sizes and fills in defaults.

    Raises:
        BenchError: An unknown option, a count that is not a positive integer, or counts
            larger than the official 50,000 training / 10,000 test images.
    """
    check_option_names("cifar10", options, DEFAULTS)
    opts = {**DEFAULTS, **options}
    for key, value in opts.items():
        low = 0 if key == "seed" else 1
        if (isinstance(value, bool) or not isinstance(value, (int, float, np.integer)) or int(value) != value
                or int(value) < low):
            kind = "an integer >= 0" if key == "seed" else "a positive integer"
            raise BenchError(f"cifar10: task.data.{key} must be {kind}, got {value!r}")
        opts[key] = int(value)
    check_counts(opts, OFFICIAL_TRAIN, OFFICIAL_TEST, "CIFAR-10 has")
    return opts


def check_counts(opts: Mapping[str, Any], n_train_images: int, n_test_images: int, source: str) -> None:
    """Checks that the split sizes fit the images there are.

    Raises:
        BenchError: train + val + population exceed the training images, or n_test the test images.
    """
    pool = sum(opts[f"n_{s}"] for s in POOL_SPLITS)
    if pool > n_train_images:
        raise BenchError(f"cifar10: n_train + n_val + n_population = {opts['n_train']} + {opts['n_val']} + "
                         f"{opts['n_population']} = {pool} but {source} {n_train_images} training images; lower "
                         "task.data.n_train, task.data.n_val or task.data.n_population")
    if opts["n_test"] > n_test_images:
        raise BenchError(f"cifar10: task.data.n_test={opts['n_test']} but {source} {n_test_images} test images; "
                         "lower task.data.n_test")


def find_base(root: Path) -> Path | None:
    """Returns the folder holding the batches (the first candidate with any of them), or None."""
    for sub in BASES:
        base = root / sub if sub else root
        if base.is_dir() and any((base / f).is_file() for f in FILES):
            return base
    return None


@register_dataset("cifar10")
class Cifar10(Dataset):
    """CIFAR-10: disjoint, class-stratified train / val / population from the training batches, test from test_batch.

    Options:
        n_train: Training records of the model, the membership members (default 25,000).
        n_val: Model-selection images (default 5,000).
        n_population: The adversary's reference data, disjoint from every other split
            (default 20,000).
        n_test: Test images, the membership non-members (default all 10,000).
        seed: Seed of the class-stratified split (default 0).
    """

    layout = (f"<root>/{FOLDER}/ (or <root>/ itself) holding {', '.join(TRAIN_FILES)}, {TEST_FILE} and {META_FILE} "
              "(the official cifar-10-python.tar.gz unpacked)")
    version = LOADER_VERSION
    description = "CIFAR-10 (32 x 32, 10 classes): class-stratified train/val/population from the 50k, test 10k"

    def inspect(self, root: Path | None, options: Mapping[str, Any]) -> DataShape:
        """Checks the options and that every file is there (none is opened); returns the shapes for the official sizes.

        The official batches hold 5,000 training and 1,000 test images of each class; the
        shapes are those of the split of such data, which :meth:`load` makes from the files.
        """
        opts = resolve_options(options)
        self._files(root)
        nominal = {"train": np.repeat(np.arange(N_CLASSES), OFFICIAL_TRAIN // N_CLASSES),
                   "test": np.repeat(np.arange(N_CLASSES), OFFICIAL_TEST // N_CLASSES)}
        picked = assign(nominal["train"], nominal["test"], opts)
        return {s: SplitShape.of_labels(nominal["test" if s == "test" else "train"][picked[s]].tolist())
                for s in SPLITS}

    def load(self, root: Path | None, options: Mapping[str, Any], cache_dir: Path) -> Splits:
        """Decodes the batches into the cache once (or reads them from it).

        Raises:
            BenchError: A file is missing or not a CIFAR-10 batch, or the options do not fit.
        """
        opts = resolve_options(options)
        base, files = self._files(root)
        key = fingerprint(self.name, LOADER_VERSION, sorted(opts.items()), source_fingerprint(files))

        def build(sink) -> dict[str, Any]:
            return _decode(sink, base, opts)

        sets, content, built = cached_sharded_splits(cache_dir, self.name, key, build)
        info = {
            "source": str(base),
            "options": dict(opts),
            "split": "seeded class-stratified order of the 50k training images: train, then val, then population; "
                     "test from test_batch",
            "n_images": {s: len(sets[s]) for s in SPLITS},
            **built,
        }
        imageread.warn_about(self.name, info)
        return Splits(self.name, sets, content, synthetic=False, info=info)

    def _files(self, root: Path | None) -> tuple[Path, list[Path]]:
        if root is None or not Path(root).is_dir():
            raise self.missing(root, "the CIFAR-10 folder")
        base = find_base(Path(root))
        if base is None:
            raise self.missing(root, f"{FOLDER}/")
        absent = [f for f in FILES if not (base / f).is_file()]
        if absent:
            raise self.missing(root, f"{', '.join(absent)} in {base}")
        return base, [base / f for f in FILES]


def _decode(sink: Any, base: Path, opts: Mapping[str, Any]) -> dict[str, Any]:
    """Reads the batches, writes the four splits into the sink and returns the info."""
    names = read_class_names(base / META_FILE)
    parts = [read_batch(base / f) for f in TRAIN_FILES]
    train_x = np.concatenate([x for x, _ in parts])
    train_y = np.concatenate([y for _, y in parts])
    sources = [f"{f}[{i}]" for f, (x, _) in zip(TRAIN_FILES, parts) for i in range(len(x))]
    del parts
    test_x, test_y = read_batch(base / TEST_FILE)
    check_counts(opts, len(train_y), len(test_y), f"{base} holds")
    picked = assign(train_y, test_y, opts)
    used_names: list[str] = []
    used_splits: list[str] = []
    digests: list[bytes] = []
    per_class: dict[str, list[int]] = {}
    for split in SPLITS:
        x, y = (test_x, test_y) if split == "test" else (train_x, train_y)
        index = picked[split]
        images = torch.from_numpy(np.ascontiguousarray(x[index]))
        labels = torch.from_numpy(y[index].astype(np.int64))
        sink.put(split, ImageSet(images=images, labels=labels))
        per_class[split] = np.bincount(y[index], minlength=N_CLASSES).tolist()
        used_names.extend(f"{TEST_FILE}[{i}]" if split == "test" else sources[i] for i in index.tolist())
        used_splits.extend([split] * len(index))
        digests.extend(_digests(images))
    total = sum(len(v) for v in picked.values())
    return {
        "classes": names,
        "per_class": per_class,
        "images": size_report(np.full((total, 2), SIDE), np.full((total, 2), SIDE), (SIDE, SIDE)),
        "duplicates": imageread.duplicates(used_names, used_splits, digests),
    }


def _digests(images: torch.Tensor) -> Sequence[bytes]:
    import xxhash

    flat = images.reshape(len(images), -1).numpy()
    return [xxhash.xxh3_64_digest(row.tobytes()) for row in flat]
