"""Resource bounds checked in the plan: the memory a cell's settings ask for, against the machine's.

Each estimate is a lower bound computed from the shapes the settings imply (the tensors
that must exist at once in one step: a split's images as network input, a batch of
episode indices, a model's weights with their gradients and Adam moments, one training
step's activations), so a cell is refused only where it cannot fit, never on a guess.
The one line names the settings that scale the estimate, those given with ``--set``
first, so ``task.episodes_per_epoch=1e9`` is refused in the plan rather than after an
hour of work with a ``MemoryError``.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from bench.errors import BenchError

FLOAT = 4
"""Bytes of a float32 (networks, inputs) and of the random keys an episode sampler draws."""
INDEX = 8
"""Bytes of an int64 index."""
TRAINING = 4
"""A trained weight is held four times: the weight, its gradient and Adam's two moments."""
CONV4_CHANNELS = 64
"""Filters of every Conv-4 block (bench.nn.conv4)."""
SAVED_PER_CONV = 3
"""Tensors a convolution block keeps for backward: the convolution's output, the norm's, the activation's."""


@dataclass(frozen=True)
class Need:
    """Memory one part of a cell needs at once.

    Attributes:
        what: What the memory holds, for the message.
        size: Bytes.
        settings: The settings that scale it (``task.episodes_per_epoch``).
        host: Whether it lives in host memory (data, indices) rather than on the device.
    """

    what: str
    size: float
    settings: tuple[str, ...]
    host: bool = True


@dataclass
class Watch:
    """What the memory checks made while it watched (:func:`watching`).

    Attributes:
        peak: The largest need that fitted, in bytes (0 when none was checked).
        refused: Whether a need did not fit.
    """

    peak: float = 0.0
    refused: bool = False

    def record(self, need: Need, have: float) -> None:
        """Notes one need checked against ``have`` bytes."""
        if need.size > have:
            self.refused = True
        else:
            self.peak = max(self.peak, need.size)


_watch: contextvars.ContextVar[Watch | None] = contextvars.ContextVar("bench_bounds_watch", default=None)


@contextlib.contextmanager
def watching() -> Iterator[Watch]:
    """Records the needs :func:`check_cell` checks in this context, for a caller that keeps what planning found.

    Planning passes the same checks on any machine with at least :attr:`Watch.peak` bytes
    available (each check compares one need with what is available), so what it found
    holds there, while a refused need depends on the machine's memory at that moment.
    """
    watch = Watch()
    token = _watch.set(watch)
    try:
        yield watch
    finally:
        _watch.reset(token)


def available_memory(cgroup_root: Path = Path("/sys/fs/cgroup"), meminfo: Path = Path("/proc/meminfo")) -> int:
    """Returns the bytes this process can still allocate: MemAvailable, within its cgroup's limit."""
    available = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    for limit_name, usage_name in (("memory.max", "memory.current"),
                                   ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes")):
        try:
            limit = int((cgroup_root / limit_name).read_text().strip())
            used = int((cgroup_root / usage_name).read_text().strip())
        except (OSError, ValueError):  # absent, or "max"
            continue
        available = min(available, max(0, limit - used))
    return available


def device_memory(device: Any) -> int:
    """Returns the bytes of a CUDA device's memory, or the host's available memory for the CPU."""
    if getattr(device, "type", str(device)) == "cuda":
        import torch

        return int(torch.cuda.get_device_properties(device).total_memory)
    return available_memory()


def check_cell(task: Any, attacks: Mapping[str, Any], shape: Mapping[str, Any] | None, device: Any,
               given: Mapping[str, Mapping[str, Any]] | None = None) -> None:
    """Refuses a cell whose settings ask for more memory than the machine has (:func:`cell_needs`).

    Args:
        task: The planned task (its ``config`` and ``data_options()``).
        attacks: Attack name -> planned attack (its ``config``).
        shape: The data's shape from the dataset's ``inspect`` (split -> counts), or None.
        device: Where the networks train.
        given: The ``--set`` overrides (section -> name -> value): their settings are named first.

    Raises:
        BenchError: One line naming the settings of the first need that cannot fit.
    """
    host, on_device = available_memory(), device_memory(device)
    watch = _watch.get()
    for need in cell_needs(task, attacks, shape):
        have = host if need.host or getattr(device, "type", "cpu") != "cuda" else on_device
        if watch is not None:
            watch.record(need, have)
        if need.size > have:
            raise BenchError(f"{_blame(need.settings, given or {})}: {need.what} needs about {_bytes(need.size)} of "
                             f"memory at once, more than the {_bytes(have)} this machine has available; lower it")


def cell_needs(task: Any, attacks: Mapping[str, Any], shape: Mapping[str, Any] | None) -> list[Need]:
    """Returns what a cell needs at once: its data as network input, then its task's and adversaries' steps."""
    cfg = getattr(task, "config", None)
    needs = list(data_needs(task, shape))
    if hasattr(cfg, "episodes_per_epoch"):
        needs += fewshot_needs(cfg, shape)
    model = getattr(cfg, "model", None)
    if hasattr(model, "mlp_dim"):
        needs += vit_needs(cfg, task.data_options())
    images = _images(shape) or _option_images(task.data_options())
    for name, attack in attacks.items():
        acfg = getattr(attack, "config", None)
        if hasattr(acfg, "enrol_per_id") and hasattr(acfg, "model"):  # a trained embedder (not a pretrained one)
            needs += face_reid_needs(name, acfg, images)
        if hasattr(acfg, "downscale"):
            needs += denoise_needs(name, acfg, _side(task, shape), images)
    return needs


def data_needs(task: Any, shape: Mapping[str, Any] | None) -> Iterable[Need]:
    """The dataset: every image stored (uint8, 3 channels, at its stored size) and as float network input.

    The stored size is what the loader read from the images' headers (``SplitShape.stored``:
    their own size, where the mechanism runs), else ``task.data.size``; a folder of photos
    far too large to hold is refused here, naming the options that shrink it.
    """
    options = task.data_options()
    count = _images(shape) or _option_images(options)
    if not count:
        return
    counts = tuple(f"task.data.{k}" for k in ("n_ids", "per_id", "n_train", "n_val", "n_test", "n_population",
                                               "classes", "images_per_class", "max_images", "max_classes",
                                               "per_class") if k in options)
    native = _stored(shape)
    stored = native or _sides(options.get("size")) or (1, 1)  # at least a pixel each
    shown = f" of {stored[0]}x{stored[1]}" if native or "size" in options else ""
    if native:
        settings = ("task.data.size", *counts, "task.data.max_classes", "task.data.per_class")
    else:
        settings = ("task.data.size", *counts) if "size" in options else counts or ("task.data",)
    yield Need(f"{count:,} stored images{shown}", count * 3 * stored[0] * stored[1], tuple(dict.fromkeys(settings)))
    cfg = getattr(task, "config", None)
    side = _sides(task.input_size())
    name = next((f"task.{n}" for n in ("image_size", "input_size") if hasattr(cfg, n)), None)
    if side and name:
        yield Need(f"{count:,} images of {side[0]}x{side[1]} as network input", count * 3 * side[0] * side[1] * FLOAT,
                   (name, *counts))


def fewshot_needs(cfg: Any, shape: Mapping[str, Any] | None) -> list[Need]:
    """A few-shot task: the episode index batches its samplers draw, and one training step of Conv-4 (and DnCNN)."""
    needs = []
    for setting, split in (("episodes_per_epoch", "train"), ("val_episodes", "val"), ("test_episodes", "test")):
        counts = list(getattr(shape.get(split), "counts", ()) if shape else ()) or [1]
        way = cfg.train_way if split == "train" else cfg.test_way
        # rand + argsort over the classes, then over each chosen class's images
        per_episode = len(counts) * (FLOAT + INDEX) + way * max(counts) * (FLOAT + INDEX + 1)
        needs.append(Need(f"the index batch of {getattr(cfg, setting):,} episodes", getattr(cfg, setting) * per_episode,
                          (f"task.{setting}",)))
    batch = cfg.train_way * (cfg.train_shot + cfg.train_query)
    pixels = cfg.image_size ** 2
    blocks = sum(4.0 ** -k for k in range(4))  # each block halves the side
    needs.append(Need(f"a training step of {batch:,} images at {cfg.image_size} px",
                      batch * pixels * CONV4_CHANNELS * blocks * SAVED_PER_CONV * FLOAT * 2,
                      ("task.train_way", "task.train_shot", "task.train_query", "task.image_size"), host=False))
    width, depth = cfg.denoiser_width, cfg.denoiser_depth
    needs.append(Need(f"a denoiser training step ({depth} layers of {width:,} filters)",
                      batch * pixels * width * depth * SAVED_PER_CONV * FLOAT * 2 + 9 * width * width * depth * FLOAT
                      * TRAINING, ("task.denoiser_width", "task.denoiser_depth", "task.image_size"), host=False))
    return needs


def vit_needs(cfg: Any, options: Mapping[str, Any]) -> list[Need]:
    """A ViT trained with DP-SGD: its weights (with per-example gradients of a batch) and one step's activations."""
    m = cfg.model
    given = getattr(m, "image_size", None)  # the ViT's input side; unset: the stored side (the size option, 32)
    side = (_sides(given) or _sides(options.get("size")) or (32, 32))[0]
    tokens = (side // max(1, m.patch_size)) ** 2 + 1
    weights = m.depth * (4 * m.width ** 2 + 2 * m.width * m.mlp_dim) + 3 * m.patch_size ** 2 * m.width
    batch = cfg.schedule.batch_size
    names = ("task.model.width", "task.model.mlp_dim", "task.model.depth", "task.model.patch_size")
    return [Need(f"a ViT of {weights:,} weights", weights * FLOAT * TRAINING, names, host=False),
            Need(f"per-example gradients of a batch of {batch:,}", batch * weights * FLOAT,
                 ("task.schedule.batch_size", *names), host=False),
            Need(f"one step's activations ({batch:,} x {tokens:,} tokens)",
                 batch * tokens * m.depth * (6 * m.width + m.mlp_dim + m.heads * tokens) * FLOAT,
                 ("task.schedule.batch_size", "task.model.mlp_dim", "task.model.width",
                  "task.model.image_size" if given else "task.data.size"), host=False)]


def face_reid_needs(name: str, cfg: Any, images: int = 0) -> list[Need]:
    """The face embedder (small CNN: 4 stages of widths w..8w): its weights in training and one step."""
    if cfg.model != "small_cnn":
        return []
    w, side = cfg.width, cfg.input_size
    weights = sum(9 * cin * cout + 9 * cout * cout for cin, cout in ((3, w), (w, 2 * w), (2 * w, 4 * w), (4 * w, 8 * w)))
    batch = min(cfg.batch_size, images or cfg.batch_size)
    step = batch * side * side * w * 2 * 2 * SAVED_PER_CONV * FLOAT * 2  # stage k: 2^k w at side/2^k
    return [Need(f"{name}'s embedder ({weights:,} weights)", weights * FLOAT * TRAINING, (f"{name}.width",),
                 host=False),
            Need(f"{name}'s training step ({batch:,} images at {side} px)", step,
                 (f"{name}.batch_size", f"{name}.input_size", f"{name}.width"), host=False)]


def denoise_needs(name: str, cfg: Any, side: int, images: int = 0) -> list[Need]:
    """The adversary's DnCNN: weights in training and one step on a batch of crops (or whole images)."""
    crop = cfg.patch or max(1, side // cfg.downscale)
    weights = 9 * cfg.width * (cfg.width * (cfg.depth - 2) + 6)
    batch = min(cfg.batch_size, images or cfg.batch_size)
    step = batch * crop * crop * cfg.width * cfg.depth * SAVED_PER_CONV * FLOAT * 2
    return [Need(f"{name}'s DnCNN ({weights:,} weights)", weights * FLOAT * TRAINING, (f"{name}.width", f"{name}.depth"),
                 host=False),
            Need(f"{name}'s training step ({batch:,} crops of {crop} px)", step,
                 (f"{name}.batch_size", f"{name}.patch", f"{name}.width", f"{name}.depth"), host=False)]


def _blame(settings: tuple[str, ...], given: Mapping[str, Mapping[str, Any]]) -> str:
    """Returns the settings as ``a=1, b`` with those given by --set first (and their values)."""
    def value(name: str) -> Any:
        section, _, rest = name.partition(".")
        return given.get(section, {}).get(rest)

    named = [f"{s}={value(s)}" for s in settings if value(s) is not None]
    return ", ".join(named or settings)


def _images(shape: Mapping[str, Any] | None) -> int:
    if not shape:
        return 0
    return sum(sum(getattr(split, "counts", ()) or ()) for split in shape.values())


def _option_images(options: Mapping[str, Any]) -> int:
    """Returns the fewest images the loader options of a generated dataset imply (before ``inspect`` counts them)."""
    def get(key: str) -> int:
        value = options.get(key)
        return int(value) if _is_count(value) else 0

    return max(get("n_ids") * max(1, get("per_id")), get("per_id"),
               sum(get(k) for k in ("n_train", "n_val", "n_test", "n_population")),
               get("classes") * max(1, get("images_per_class")), get("images_per_class"), get("max_images"))


def _stored(shape: Mapping[str, Any] | None) -> tuple[int, int] | None:
    """Returns the stored (height, width) a loader read from the images' headers (``SplitShape.stored``), else None."""
    for split in (shape or {}).values():
        stored = getattr(split, "stored", None)
        if stored:
            return int(stored[0]), int(stored[1])
    return None


def _sides(size: Any) -> tuple[int, int] | None:
    """Returns (height, width) of a ``size`` option or input size (an int, a pair), else None."""
    if _is_count(size):
        return int(size), int(size)
    if isinstance(size, (tuple, list)) and len(size) == 2 and all(_is_count(s) for s in size):
        return int(size[0]), int(size[1])
    return None


def _side(task: Any, shape: Mapping[str, Any] | None = None) -> int:
    sides = _stored(shape) or _sides(task.data_options().get("size")) or _sides(task.input_size()) or (64, 64)
    return max(sides)


def _is_count(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _bytes(size: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if size < 1000 or unit == "PB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1000
    return f"{size:.1f} PB"
