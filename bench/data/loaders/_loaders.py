"""What the file-backed loaders share: decoding image files, parsing options, cache payloads."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import fields
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import torch
from PIL import Image

from bench.data.base import ImageSet
from bench.errors import BenchError
from bench.system.cpus import usable_cpus

__all__ = ["check_options", "decode_images", "from_payload", "image_size", "person_size", "positive_int",
           "progress_bar", "to_payload"]


def decode_images(paths: Sequence[Path], size: tuple[int, int], desc: str = "decoding") -> torch.Tensor:
    """Reads image files into a uint8 tensor [N, 3, h, w], in parallel threads.

    Images of another size are resized with PIL's bilinear filter, which antialiases
    when it shrinks.

    Args:
        paths: Image files.
        size: Output (h, w).
        desc: Label of the progress bar (shown on a terminal only).

    Raises:
        BenchError: A file cannot be decoded.
    """
    h, w = size
    out = torch.empty((len(paths), 3, h, w), dtype=torch.uint8)
    view = out.numpy()

    def read(i: int) -> None:
        try:
            with Image.open(paths[i]) as img:
                img = img.convert("RGB")
                if img.size != (w, h):
                    img = img.resize((w, h), Image.Resampling.BILINEAR)
                view[i] = np.asarray(img).transpose(2, 0, 1)
        except (OSError, ValueError) as exc:
            raise BenchError(f"cannot decode image {paths[i]}: {exc}") from None

    workers = min(8, usable_cpus())
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for _ in progress_bar(pool.map(read, range(len(paths))), len(paths), desc):
            pass
    return out


def progress_bar(it: Iterable[Any], total: int, desc: str) -> Iterable[Any]:
    """Wraps a long loop in a progress bar on a terminal (2,000 items or more); returns it as is elsewhere."""
    if total < 2000 or not sys.stderr.isatty():
        return it
    from tqdm import tqdm

    return tqdm(it, total=total, desc=desc, leave=False)


def image_size(value: Any, default: tuple[int, int]) -> tuple[int, int]:
    """Parses a ``size`` option: an (h, w) pair, or one int for a square.

    Raises:
        BenchError: The value is not one or two positive ints.
    """
    if value is None:
        return default
    parts = [value] if isinstance(value, int) else list(value) if isinstance(value, (list, tuple)) else None
    if parts is None or len(parts) not in (1, 2) or not all(isinstance(p, int) and p > 0 for p in parts):
        raise BenchError(f"option size must be a positive int or [h, w], got {value!r}")
    return (parts[0], parts[-1])


def person_size(value: Any, default: tuple[int, int]) -> tuple[int, int]:
    """Parses the ``size`` option of a pedestrian dataset: (h, w), or one int h for (h, h // 2).

    Raises:
        BenchError: The value is not one or two positive ints.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value, max(1, value // 2)]
    return image_size(value, default)


def positive_int(options: Mapping[str, Any], key: str) -> int | None:
    """Returns an optional positive-int option.

    Raises:
        BenchError: The value is not a positive int.
    """
    value = options.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BenchError(f"option {key} must be a positive int, got {value!r}")
    return value


def check_options(dataset: str, options: Mapping[str, Any], allowed: Sequence[str]) -> None:
    """Raises BenchError for an option the dataset does not know."""
    from bench.data.options import hint

    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise BenchError(f"{dataset}: unknown option(s) {', '.join(unknown)}{hint(unknown[0], dict.fromkeys(allowed))} "
                         f"(known: {', '.join(allowed)})")


def to_payload(splits: Mapping[str, ImageSet], info: Mapping[str, Any]) -> dict[str, Any]:
    """Returns splits as plain dicts of tensors (loadable with ``weights_only``)."""
    sets = {name: {f.name: getattr(s, f.name) for f in fields(s)} for name, s in splits.items()}
    return {"sets": sets, "info": dict(info)}


def from_payload(payload: Mapping[str, Any]) -> dict[str, ImageSet]:
    """Rebuilds the image sets of :func:`to_payload`."""
    return {name: ImageSet(**fields_) for name, fields_ in payload["sets"].items()}
