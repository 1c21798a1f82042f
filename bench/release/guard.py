"""Every call into a mechanism: inputs it cannot damage for anyone else, outputs checked.

A mechanism is code we did not write (``--mechanism-file``, an entry point). A batch handed
to it in place would let it change the clean split that the task, the adversaries and the
cached models of every later cell read; boxes and streams likewise. So every caller
(cell releases, adaptive adversaries, ``bench release``, ``bench mechanisms show``, the
audit) goes through :func:`apply` and :func:`fit`, which give the mechanism private
copies:

- images: a copy in memory of its own (on an accelerator the upload is that copy; on the
  CPU one copy of the batch, about 8 ms per 20 MiB). A copy rather than a checksum before
  and after the call: it costs about as much time as one pass of a checksum, and it also
  contains what a checksum cannot see (a reference kept and written later, writes through
  the storage of a view reaching the rest of the split);
- boxes and the streams' seeds: copies (a few bytes per image);
- fit data: a copy of the set (tensors cloned; a split kept on disk is read afresh anyway).

A plugin's cells are also preceded by the cheap conformance checks (:func:`bench.cell.preflight.preflight`,
called by :func:`bench.cell.plan.plan`), once per process per mechanism, parameters and
device, so that a mechanism that writes into its input, returns the wrong shape or dtype,
or is not deterministic is refused in one line before anything is written.

This contains mistakes, not malice: a plugin is Python running in the process and could
reach anything in it.
"""

from __future__ import annotations

import copy
import dataclasses
import sys
from typing import Any

import torch

from bench.core.interfaces import Mechanism, RunContext
from bench.data.base import ImageSet
from bench.randomness.streams import Streams


def private_batch(images: torch.Tensor, device: torch.device | str | None = None) -> torch.Tensor:
    """Returns a copy of ``images`` on ``device`` (default: where they are) that shares no memory with them.

    To a CUDA device the copy goes through pinned memory without blocking the host.
    """
    device = images.device if device is None else torch.device(device)
    if device.type == "cuda" and images.device.type == "cpu":
        return images.pin_memory().to(device, non_blocking=True)
    return images.to(device, copy=True)


def apply(
    mechanism: Mechanism,
    images: torch.Tensor,
    *,
    generator: Streams,
    boxes: list[torch.Tensor] | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Runs ``mechanism.apply`` on private copies of a batch, its boxes and its streams.

    Args:
        mechanism: A configured (fitted) mechanism.
        images: uint8 [N, C, H, W], anywhere; never handed to the mechanism itself.
        generator: The batch's streams (a copy of their seeds is handed over; streams
            without seeds, such as :class:`~bench.release.secure_streams.SecureStreams`, as they are).
        boxes: Face boxes per image, or None.
        device: Where the mechanism runs (default: where ``images`` are).

    Returns:
        The released uint8 batch, of the input's shape.

    Raises:
        RuntimeError: The mechanism returned something else (naming the mechanism).
    """
    device = images.device if device is None else torch.device(device)
    private = private_batch(images, device)
    if boxes is not None:
        boxes = [b.to(device, copy=True) for b in boxes]
    released = mechanism.apply(private, generator=_private_streams(generator), boxes=boxes)
    check_output(mechanism, private, released)
    return released


def fit(mechanism: Mechanism, data: ImageSet, ctx: RunContext) -> None:
    """Runs ``mechanism.fit`` on a private copy of ``data`` (the caller's set stays as it was)."""
    mechanism.fit(private_set(data), ctx)


def private_set(data: ImageSet) -> ImageSet:
    """Returns a copy of an image set that shares no memory with it (a split on disk: a fresh reader)."""
    images = data.images.clone() if isinstance(data.images, torch.Tensor) else copy.deepcopy(data.images)
    return dataclasses.replace(
        data,
        images=images,
        labels=data.labels.clone(),
        attrs={name: values.clone() for name, values in data.attrs.items()},
        attr_names=copy.deepcopy(data.attr_names),
        boxes=None if data.boxes is None else [b.clone() for b in data.boxes],
        cams=None if data.cams is None else data.cams.clone(),
    )


def check_output(mechanism: Mechanism, images: torch.Tensor, released: Any) -> None:
    """Checks that a mechanism returned a uint8 tensor of the input's shape.

    Raises:
        RuntimeError: It did not (one line naming the mechanism, what it returned and what was expected).
    """
    if not isinstance(released, torch.Tensor) or released.dtype != torch.uint8 or released.shape != images.shape:
        got = (getattr(released, "dtype", type(released).__name__), tuple(getattr(released, "shape", ())))
        raise RuntimeError(
            f"mechanism {type(mechanism).name!r} returned {got}; expected uint8 of shape {tuple(images.shape)}"
        )


def _private_streams(generator: Streams) -> Streams:
    if type(generator) is Streams:
        return Streams(generator.seeds.clone(), generator.device)
    return generator


def is_builtin(cls: type[Mechanism]) -> bool:
    """Whether a mechanism class is one of PrivBench's own (defined in a module of its ``mechanisms`` package).

    Everything else (``--mechanism-file``, an entry point, a class registered by a test) is a plugin.
    """
    from bench.core.registry import mechanisms

    module = cls.__module__ or ""
    inside = any(module == package or module.startswith(package + ".") for package in mechanisms.packages)
    return inside and getattr(sys.modules.get(module), cls.__qualname__, None) is cls
