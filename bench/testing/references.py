"""Per-image reference implementations of the papers' released code, for tests and benchmarks."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFilter


def authors_face_blur(img: np.ndarray, boxes: Sequence[Sequence[float]], measure: str = "diagonal") -> np.ndarray:
    """The ImageNet paper's released face blurring (App. B).

    Every face box grows by a tenth of its size d into a black mask; the image is blurred
    with a Gaussian of radius d_max / 10 (d_max the largest size) and composited through
    the mask blurred by the same radius.

    Args:
        img: uint8 H x W x C image (C = 1 or 3).
        boxes: Face boxes ``[x0, y0, x1, y1]`` in pixels; empty boxes are skipped.
        measure: d is the Euclidean ``diagonal`` (the paper's text) or the ``longer_side``
            max(width, height), as the released code computes it.

    Returns:
        uint8 H x W x C image.
    """
    grey = img.shape[2] == 1
    pil = Image.fromarray(img[..., 0] if grey else img)
    mask = Image.new("L", pil.size, "white")
    d_max = 0.0
    for x0, y0, x1, y1 in boxes:
        if x0 >= x1 or y0 >= y1:
            continue
        d = math.hypot(x1 - x0, y1 - y0) if measure == "diagonal" else max(x1 - x0, y1 - y0)
        d_max = max(d_max, d)
        ImageDraw.Draw(mask).rectangle([x0 - d / 10, y0 - d / 10, x1 + d / 10, y1 + d / 10], fill="black")
    blurred = pil.filter(ImageFilter.GaussianBlur(d_max / 10))
    soft = mask.filter(ImageFilter.GaussianBlur(d_max / 10))
    out = np.asarray(Image.composite(pil, blurred, soft))
    return out[..., None] if grey else out
