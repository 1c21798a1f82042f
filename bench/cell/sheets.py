"""Sample sheets: labelled PNG grids of images, one row per mechanism setting."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont

from bench.errors import BenchError

_GAP = 2
_PAD = 6
_BACKGROUND = (255, 255, 255)
_INK = (20, 20, 20)
_FONT_SIZE = 12


def _to_rgb_array(images: torch.Tensor) -> np.ndarray:
    if images.dtype != torch.uint8 or images.dim() != 4 or images.shape[1] not in (1, 3):
        raise BenchError(f"a sample sheet row must be uint8 [N, 1 or 3, H, W], got {images.dtype} {tuple(images.shape)}")
    return images.detach().cpu().expand(-1, 3, -1, -1).permute(0, 2, 3, 1).numpy()


def _label_width(draw: ImageDraw.ImageDraw, labels: Sequence[str], font) -> int:
    widest = max((draw.textlength(line, font=font) for label in labels for line in label.split("\n")), default=0)
    return int(widest) + 2 * _PAD


def check_sheet_path(path: str | Path) -> Path:
    """Checks, before any work, that a sample sheet can be written to ``path`` (``--out``); creates nothing.

    Returns:
        The path.

    Raises:
        BenchError: Not a ``.png`` name, a folder, or in a folder that does not exist.
    """
    path = Path(path)
    if path.is_dir():
        raise BenchError(f"--out {path} is a folder; give a .png file")
    if path.suffix.lower() != ".png":
        raise BenchError(f"--out {path}: a sample sheet is a PNG; give a file name ending in .png")
    if not path.parent.is_dir():
        raise BenchError(f"--out {path}: no folder {path.parent} to write into")
    return path


def sample_sheet(
    rows: list[tuple[str, torch.Tensor]],
    path: str | Path,
    *,
    scale: int = 1,
    palette: bool = False,
) -> Path:
    """Writes a labelled grid of images as a PNG.

    Args:
        rows: (label, uint8 [N, C, H, W] images) per row; a label may hold several lines.
        path: Where to write the PNG (parent folders are created).
        scale: Integer upscaling of every image (nearest neighbour), for small images.
        palette: Save with a 256-colour palette (smaller files, e.g. for documentation).

    Returns:
        The path written.

    Raises:
        BenchError: No rows, or a row that is not uint8 grey or RGB images.
    """
    if not rows:
        raise BenchError("a sample sheet needs at least one row")
    arrays = [_to_rgb_array(images) for _, images in rows]
    if scale > 1:
        arrays = [a.repeat(scale, axis=1).repeat(scale, axis=2) for a in arrays]
    font = ImageFont.load_default(size=_FONT_SIZE)
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    label_w = _label_width(probe, [label for label, _ in rows], font)
    line_h = int(probe.textbbox((0, 0), "Ag", font=font)[3]) + 4
    heights = [max(a.shape[1] if len(a) else 0, line_h * len(label.split("\n"))) for (label, _), a in zip(rows, arrays)]
    widths = [sum(img.shape[1] + _GAP for img in a) for a in arrays]
    sheet = Image.new("RGB", (label_w + max(widths) + _PAD, sum(heights) + _GAP * (len(rows) + 1)), _BACKGROUND)
    draw = ImageDraw.Draw(sheet)
    top = _GAP
    for (label, _), array, height in zip(rows, arrays, heights):
        draw.multiline_text((_PAD, top + 2), label, fill=_INK, font=font)
        left = label_w
        for img in array:
            sheet.paste(Image.fromarray(np.ascontiguousarray(img)), (left, top))
            left += img.shape[1] + _GAP
        top += height + _GAP
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if palette:
        sheet = sheet.quantize(256, dither=Image.Dither.NONE)
    sheet.save(path, optimize=True)
    return path
