"""Folders of images in and out: RGB uint8 pixels in, files with no metadata out.

Reading applies the EXIF orientation, converts colour-managed images to sRGB and every
mode (grey, palette, CMYK, 16-bit, alpha) to 8-bit RGB. Writing builds a fresh image from
the pixel array alone and saves it with no EXIF, XMP, ICC profile, text chunks or
thumbnail (a thumbnail would be the unobfuscated image), to a temporary file in the
target folder that is then renamed, so a killed run never leaves a partial image under
its final name. Face boxes for a folder come from a CSV of ``file,x1,y1,x2,y2`` rows.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import math
import os
import secrets
import warnings
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Callable

import numpy as np
import torch
from PIL import Image, ImageCms, ImageOps, UnidentifiedImageError

from bench.errors import BenchError

FORMATS = {"png": ("PNG", ".png", {}), "jpeg": ("JPEG", ".jpg", {"quality": 95})}
"""Output format name -> (PIL format, suffix, save options)."""

ONE_CHANNEL = frozenset({"1", "L", "LA", "La", "I", "I;16", "I;16L", "I;16B", "I;16N"})
"""PIL modes with one colour channel (alpha, composited over white, adds none)."""
_SIXTEEN_BIT = {"I", "I;16", "I;16L", "I;16B", "I;16N"}
_WITH_ALPHA = {"RGBA", "LA", "PA", "La", "RGBa"}
_SRGB = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB"))


@dataclass(frozen=True)
class ImageEntry:
    """An image found under an input folder.

    Attributes:
        relative: Its path under the folder.
        height: Height after the EXIF orientation is applied.
        width: Width after the EXIF orientation is applied.
        frames: Frames in the file; only the first is read.
        digest: Hash of the decoded pixels (finds the same image under two names).
        channels: 1 for a one-channel image (grey, 16-bit grey, grey with alpha, bilevel), else 3.
    """

    relative: PurePosixPath
    height: int
    width: int
    frames: int = 1
    digest: str = ""
    channels: int = 3


def scan_folder(root: Path) -> tuple[list[ImageEntry], list[PurePosixPath]]:
    """Lists the images under a folder, decoding each once to prove it can be read.

    Files and folders whose names start with ``.`` are left out; files that PIL does not
    recognise as images are returned as skipped.

    Args:
        root: The folder, searched recursively; paths are sorted.

    Returns:
        (images, skipped files), both with paths relative to ``root``.

    Raises:
        BenchError: An image that PIL recognises but cannot decode.
    """
    images, skipped = [], []
    for relative in _walk(root):
        pixels, frames, channels = _decode(root / relative)
        if pixels is None:
            skipped.append(relative)
        else:
            digest = hashlib.blake2b(pixels.tobytes(), digest_size=16).hexdigest()
            images.append(ImageEntry(relative, pixels.shape[0], pixels.shape[1], frames, digest, channels))
    return images, skipped


def _walk(root: Path) -> list[PurePosixPath]:
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        base = Path(folder).relative_to(root)
        found.extend(PurePosixPath((base / f).as_posix()) for f in files if not f.startswith("."))
    return sorted(found, key=str)


def read_rgb(path: Path) -> np.ndarray:
    """Returns an image's pixels as uint8 [H, W, 3] RGB (oriented, sRGB, alpha over white).

    Raises:
        BenchError: The file is not an image PIL can read.
    """
    pixels, _, _ = _decode(path)
    if pixels is None:
        raise BenchError(f"{path}: not an image that PIL can read")
    return pixels


def read_pixels(path: Path, channels: int) -> np.ndarray:
    """Returns an image's pixels as uint8 [H, W, channels]: RGB, or one grey channel.

    Grey is ITU-R 601 luma, as the dataset loaders store it: exact for one-channel images,
    whose RGB has three equal channels.

    Raises:
        BenchError: The file is not an image PIL can read.
    """
    return with_channels(read_rgb(path), channels)


def with_channels(rgb: np.ndarray, channels: int) -> np.ndarray:
    """Returns uint8 [H, W, 3] RGB pixels as [H, W, channels] (1: PIL's luma, 3: as given)."""
    if channels == 3:
        return rgb
    return np.asarray(Image.fromarray(rgb).convert("L"), dtype=np.uint8)[..., None]


def _decode(path: Path) -> tuple[np.ndarray | None, int, int]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(path) as image:
                frames = int(getattr(image, "n_frames", 1))
                image.load()
                return to_rgb(image), frames, 1 if image.mode in ONE_CHANNEL else 3
    except UnidentifiedImageError:
        return None, 0, 0
    except BenchError as exc:
        raise BenchError(f"{path}: {exc}") from None
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError, EOFError) as exc:
        raise BenchError(f"cannot read image {path}: {type(exc).__name__}: {exc}") from None


def to_rgb(image: Image.Image, oriented: bool = True) -> np.ndarray:
    """Returns a PIL image's pixels as uint8 [H, W, 3] RGB.

    The EXIF orientation is applied unless ``oriented`` is false (pixels in stored order, the
    frame of datasets whose annotations ignore it); an embedded ICC profile is used to convert to sRGB
    (the profile is not written back, so values must be sRGB); 16-bit grey is scaled by
    1/257; alpha (and palette transparency) is composited over white.

    Raises:
        BenchError: A mode with no 8-bit RGB meaning (32-bit float).
    """
    if oriented:
        image = ImageOps.exif_transpose(image) or image
    image = _to_srgb(image)
    mode = image.mode
    if mode == "F":
        raise BenchError("32-bit float images are not supported (no defined 8-bit range)")
    if mode in _SIXTEEN_BIT:
        wide = np.asarray(image).astype(np.int64).clip(0, 65535)
        return np.repeat(((wide + 128) // 257).astype(np.uint8)[..., None], 3, axis=2)
    if mode in _WITH_ALPHA or (mode == "P" and "transparency" in image.info):
        rgba = np.asarray(image.convert("RGBA")).astype(np.uint32)
        alpha = rgba[..., 3:]
        blended = (rgba[..., :3] * alpha + 255 * (255 - alpha) + 127) // 255
        return blended.astype(np.uint8)
    try:
        rgb = image if mode == "RGB" else image.convert("RGB")
    except ValueError as exc:
        raise BenchError(f"cannot convert image mode {mode} to RGB ({exc})") from None
    return np.asarray(rgb, dtype=np.uint8).copy()


def _to_srgb(image: Image.Image) -> Image.Image:
    icc = image.info.get("icc_profile")
    if not icc or image.mode not in ("RGB", "CMYK", "RGBA"):
        return image
    try:
        source = ImageCms.ImageCmsProfile(io.BytesIO(icc))
        if image.mode == "RGBA":
            return ImageCms.profileToProfile(image, source, _SRGB, outputMode="RGBA")
        return ImageCms.profileToProfile(image, source, _SRGB, outputMode="RGB")
    except (ImageCms.PyCMSError, OSError, ValueError):
        return image  # a broken or mismatched profile: the values are used as they are


def output_path(relative: PurePosixPath, fmt: str) -> PurePosixPath:
    """Returns where an input's release goes: the same relative path with the format's suffix."""
    return relative.with_suffix(FORMATS[fmt][1])


def write_image(pixels: np.ndarray, path: Path, fmt: str) -> None:
    """Writes uint8 [H, W, 3] (or [H, W, 1] grey) pixels as a file with no metadata, atomically.

    Args:
        pixels: The image.
        path: Final file name; its folder is created.
        fmt: ``png`` or ``jpeg``.
    """
    pil_format, _, options = FORMATS[fmt]
    if pixels.ndim == 3 and pixels.shape[2] == 1:
        pixels = pixels[..., 0]
    fresh = Image.fromarray(np.ascontiguousarray(pixels, dtype=np.uint8))
    atomic_write(path, lambda f: fresh.save(f, format=pil_format, **options))


def atomic_write(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    """Writes a file through a temporary sibling and renames it into place.

    Args:
        path: Final file name; its folder is created.
        write: Writes the content to a binary file object.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    try:
        with open(tmp, "xb") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def read_box_file(path: Path, images: list[ImageEntry]) -> dict[PurePosixPath, torch.Tensor]:
    """Reads face boxes from a CSV of ``file,x1,y1,x2,y2`` rows (pixels of the oriented image).

    ``file`` is relative to ``--in``; an image may have several rows, and one row with
    the file name alone marks an image without faces. Every image must be listed: an
    image left out would be released with its faces. A header row starting with
    ``file`` is allowed.

    Returns:
        Float32 boxes [k, 4] per image.

    Raises:
        BenchError: A malformed row, an unknown file, a box outside its image or an
            image that is not listed.
    """
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = [[c.strip() for c in row] for row in csv.reader(f)]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise BenchError(f"--boxes {path}: cannot read it as a UTF-8 CSV ({type(exc).__name__})") from None
    known = {e.relative: e for e in images}
    found: dict[PurePosixPath, list[list[float]]] = {}
    for line, cells in enumerate(rows, start=1):
        if not any(cells) or (line == 1 and cells[0].lower() == "file"):
            continue
        name = PurePosixPath(cells[0])
        if name not in known:
            raise BenchError(f"--boxes {path}, line {line}: {cells[0]!r} is not an image under --in")
        boxes = found.setdefault(name, [])
        if any(cells[1:]):
            boxes.append(_box(path, line, cells, known[name]))
    missing = [str(e.relative) for e in images if e.relative not in found]
    if missing:
        raise BenchError(f"--boxes {path}: {len(missing)} images are not listed (e.g. {missing[0]}); list every "
                         "image, with a row holding only its name if it has no face")
    return {name: torch.tensor(rows, dtype=torch.float32).reshape(-1, 4) for name, rows in found.items()}


def parse_box(cells: list[str], where: str) -> list[float]:
    """Reads one ``file,x1,y1,x2,y2`` row of a boxes CSV into [x1, y1, x2, y2] (pixels).

    Raises:
        BenchError: Not five fields, a coordinate that is not a finite number, or not
            x1 < x2 and y1 < y2; the message starts with ``where``.
    """
    if len(cells) != 5:
        raise BenchError(f"{where}: expected file,x1,y1,x2,y2, got {len(cells)} fields")
    try:
        x1, y1, x2, y2 = (float(c) for c in cells[1:])
    except ValueError:
        raise BenchError(f"{where}: coordinates must be numbers, got {','.join(cells[1:])}") from None
    if not all(math.isfinite(v) for v in (x1, y1, x2, y2)) or not (x1 < x2 and y1 < y2):
        raise BenchError(f"{where}: a box needs x1 < x2 and y1 < y2, got {','.join(cells[1:])}")
    return [x1, y1, x2, y2]


def _box(path: Path, line: int, cells: list[str], entry: ImageEntry) -> list[float]:
    where = f"--boxes {path}, line {line}"
    x1, y1, x2, y2 = parse_box(cells, where)
    if x2 <= 0 or y2 <= 0 or x1 >= entry.width or y1 >= entry.height:
        raise BenchError(f"{where}: box lies outside the {entry.width}x{entry.height} image "
                         "(coordinates are of the image after its EXIF orientation)")
    return [x1, y1, x2, y2]
