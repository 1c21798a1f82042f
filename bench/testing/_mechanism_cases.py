"""The batches, instances and error that the mechanism conformance checks share."""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

from bench.core.interfaces import Mechanism, RunContext
from bench.core.registry import mechanisms
from bench.data.base import ImageSet
from bench.errors import BenchError
from bench.randomness.streams import Streams

CASE_SHAPES: tuple[tuple[int, int, int, int], ...] = ((4, 3, 32, 24), (4, 1, 19, 13))
"""Batches every check runs on: colour, and grey with sizes no block divides."""

_shapes: contextvars.ContextVar[tuple[tuple[int, int, int, int], ...] | None] = contextvars.ContextVar(
    "conformance_shapes", default=None)

SEED = 20240601
_cache_dir: Path | None = None


class ConformanceError(AssertionError):
    """A mechanism broke a rule of the interface; the message says which and how."""


def synthetic_boxes(n: int, height: int, width: int) -> list[torch.Tensor]:
    """Returns face boxes (x1, y1, x2, y2) for a batch: one, two overlapping, none, one cut by the edge."""
    h, w = float(height), float(width)
    patterns = [
        [[0.3 * w, 0.25 * h, 0.7 * w, 0.7 * h]],
        [[0.1 * w, 0.1 * h, 0.45 * w, 0.5 * h], [0.35 * w, 0.3 * h, 0.9 * w, 0.8 * h]],
        [],
        [[-0.2 * w, 0.6 * h, 0.3 * w, 1.2 * h]],
    ]
    return [torch.tensor(patterns[i % 4], dtype=torch.float32).reshape(-1, 4) for i in range(n)]


@dataclass
class Case:
    """One batch the checks run a mechanism on: images, boxes, their noise streams and a public set to fit on."""

    images: torch.Tensor
    boxes: list[torch.Tensor] | None
    streams: Streams
    public: ImageSet = field(repr=False, default=None)  # type: ignore[assignment]


def _context(device: torch.device) -> RunContext:
    global _cache_dir
    if _cache_dir is None:
        _cache_dir = Path(tempfile.mkdtemp(prefix="bench-conformance-"))
        atexit.register(shutil.rmtree, _cache_dir, ignore_errors=True)
    return RunContext(device=device, seed=SEED, profile="smoke", data_root=None, cache_dir=_cache_dir)


def _random_images(shape: Sequence[int], seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, tuple(shape), generator=g, dtype=torch.uint8)


def public_set(c: int, h: int, w: int, n: int = 16) -> ImageSet:
    """Returns ``n`` random public images of one shape, with boxes, for mechanisms that fit."""
    images = _random_images((n, c, h, w), seed=h * 1000 + w)
    return ImageSet(images=images, labels=torch.zeros(n, dtype=torch.int64), boxes=synthetic_boxes(n, h, w))


@contextlib.contextmanager
def case_shapes(shapes: Sequence[tuple[int, int, int, int]]):
    """Within the block the checks run on batches of ``shapes`` (N, C, H, W) instead of :data:`CASE_SHAPES`."""
    token = _shapes.set(tuple(tuple(int(d) for d in s) for s in shapes))  # type: ignore[misc]
    try:
        yield
    finally:
        _shapes.reset(token)


def make_cases(cls: type[Mechanism], device: torch.device) -> list[Case]:
    """Returns one :class:`Case` per shape of :data:`CASE_SHAPES` (or :func:`case_shapes`), on ``device``.

    Boxes only where ``cls`` uses them.
    """
    cases = []
    for k, (n, c, h, w) in enumerate(_shapes.get() or CASE_SHAPES):
        images = _random_images((n, c, h, w), seed=k).to(device)
        boxes = synthetic_boxes(n, h, w) if cls.uses_boxes else None
        streams = Streams.for_images(SEED, f"conformance/{k}", n, device=device)
        cases.append(Case(images, boxes, streams, public_set(c, h, w)))
    return cases


def _suite_params(cls: type[Mechanism], params: Mapping[str, Any] | None) -> dict[str, Any]:
    return dict(params if params is not None else getattr(cls, "conformance_params", None) or {})


def build_mechanism(name: str, params: Mapping[str, Any] | None) -> tuple[type[Mechanism], Mechanism]:
    """Returns the registered class and an instance (``params``, else its ``conformance_params``).

    Raises:
        ConformanceError: The parameters are refused.
    """
    cls = mechanisms.get(name)
    params = _suite_params(cls, params)
    try:
        return cls, cls(**params)
    except BenchError as exc:
        raise ConformanceError(f"cannot build {name!r} with {params}: {exc}") from exc


def fitted_mechanism(cls: type[Mechanism], params: Mapping[str, Any] | None, public: ImageSet, device: torch.device) -> Mechanism:
    """Returns a new instance of ``cls`` fitted on ``public`` in a throwaway cache."""
    mech = cls(**_suite_params(cls, params))
    mech.fit(public, _context(device))
    return mech


def apply_case(mech: Mechanism, case: Case, images: torch.Tensor | None = None, index: slice | None = None) -> torch.Tensor:
    """Applies ``mech`` to a case's images (or ``images``), optionally to the slice ``index`` of its streams and boxes."""
    images = case.images if images is None else images
    streams = case.streams if index is None else case.streams[index]
    boxes = case.boxes if index is None or case.boxes is None else case.boxes[index]
    return mech.apply(images, generator=streams, boxes=boxes)


def checked_in_worker(check: str, name: str, params: Mapping[str, Any] | None,
                      device: str | torch.device | None) -> bool:
    """Runs ``check`` inside the worker of an isolated mechanism (:mod:`bench.testing.isolated`); False for others.

    The checks that look at a mechanism's own memory, and the one whose noise probe its file
    may declare, cannot see it across a process: they run next to it, on its real class.

    Raises:
        ConformanceError: The check failed in the worker.
    """
    remote = getattr(mechanisms.get(name), "isolated_check", None)
    if remote is None:
        return False
    remote(check, params, device, _shapes.get())
    return True


def check_devices(device: str | torch.device | None) -> list[torch.device]:
    """Returns the devices to check on: ``device``, else the CPU and CUDA where present."""
    if device is not None:
        return [torch.device(device)]
    found = [torch.device("cpu")]
    if torch.cuda.is_available():
        found.append(torch.device("cuda"))
    return found


def failure(name: str, message: str) -> ConformanceError:
    """Returns the error for mechanism ``name`` breaking a rule."""
    return ConformanceError(f"{name}: {message}")
