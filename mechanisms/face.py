"""Face obfuscation inside given face boxes (ImageNet face-obfuscation paper)."""

from __future__ import annotations

import functools
import threading
from typing import Any

import numpy as np
import torch

from bench.core.interfaces import Mechanism, Param, ParamSpace, Streams
from bench.core.registry import register_mechanism
from bench.errors import BenchError
from mechanisms._blur import blend_blurred
from mechanisms._threads import run_beside

OVERLAY_COLOURS: dict[str, tuple[float, float, float]] = {
    "mean": (0.485 * 255, 0.456 * 255, 0.406 * 255),
    "red": (255.0, 0.0, 0.0),
    "green": (0.0, 255.0, 0.0),
    "blue": (0.0, 0.0, 255.0),
}
"""Overlay colours; ``mean`` is the average ILSVRC training colour (paper, Sec. 4)."""

_LUMA = (0.299, 0.587, 0.114)
PIECE_VALUES = 1 << 20
"""Values face_overlay copies and fills at a time on the CPU: a piece stays in cache between the two."""
THREAD_IMAGE_VALUES = 1 << 17
"""Values per image (about 209x209 RGB) from which face_overlay's CPU work takes more than one thread.

Smaller images are copied and filled on one thread: their per-box Python steps then
outweigh the copies, and threads contending for the GIL were slower than one on 2 cores
(2 threads against 1, 300 images: 0.88x at 64x64 RGB, 0.86x at 128x128, 1.05x at
160x160; 1.18x at 224x224 and 1.10x at 448x448, where the copies fill the memory bus).
"""


def _check_boxes(owner: str, images: torch.Tensor, boxes: list[torch.Tensor] | None) -> list[int]:
    """Checks that every image has a tensor of face boxes [k, 4]; returns each image's k."""
    if boxes is None:
        raise BenchError(
            f"mechanism {owner!r} needs face boxes, but none were given: use a dataset with boxes "
            "or detect them first with bench.faces.detect.detect_boxes"
        )
    if len(boxes) != images.shape[0]:
        raise BenchError(f"mechanism {owner!r} got boxes for {len(boxes)} images, expected {images.shape[0]}")
    counts = []
    for b in boxes:
        shape = b.shape
        if len(shape) != 2 or shape[1] != 4:
            raise BenchError(f"mechanism {owner!r}: face boxes must be tensors [k, 4] (x1, y1, x2, y2), got {tuple(shape)}")
        counts.append(shape[0])
    return counts


def _flatten_boxes(boxes: list[torch.Tensor], counts: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns all non-degenerate boxes as float64 [B, 4] and the image each belongs to [B], on the host.

    Box geometry is a few numbers per image: it stays on the host, so that deciding what
    to draw never waits for the device. It is worked out in numpy: on a batch of a few
    hundred images each torch call here cost more than the numbers it handles.

    Args:
        boxes: Each image's boxes [k, 4], already checked (:func:`_check_boxes`).
        counts: Each image's k, as :func:`_check_boxes` returns them.
    """
    # One cat and one copy for the batch; float32 and int coordinates are exact in float64,
    # so converting after the cat changes nothing.
    flat = torch.cat(boxes).detach().to("cpu", torch.float64).numpy() if boxes else np.zeros((0, 4))
    # numpy, not torch.repeat_interleave: that wakes torch's worker threads, which then spin
    # for milliseconds on cores that face_overlay's threads need.
    owner = np.repeat(np.arange(len(boxes), dtype=np.int64), counts)
    keep = (flat[:, 0] < flat[:, 2]) & (flat[:, 1] < flat[:, 3])
    return torch.from_numpy(flat[keep]), torch.from_numpy(owner[keep])


def _box_sizes(flat: torch.Tensor, measure: str) -> torch.Tensor:
    """Returns each box's size d_i: its diagonal (App. B) or its longer side (the released code)."""
    width, height = flat[:, 2] - flat[:, 0], flat[:, 3] - flat[:, 1]
    return torch.hypot(width, height) if measure == "diagonal" else torch.maximum(width, height)


def box_mask(flat: torch.Tensor, owner: torch.Tensor, n: int, height: int, width: int,
             device: torch.device | str = "cpu") -> torch.Tensor:
    """Rasterises boxes like ``PIL.ImageDraw.rectangle``: coordinates truncated, ends included.

    Args:
        flat: float64 [B, 4] boxes (x1, y1, x2, y2), on the host.
        owner: int64 [B] index of each box's image, in non-decreasing order, on the host.
        n: Number of images.
        height: Image height.
        width: Image width.
        device: Where the mask is made.

    Returns:
        bool [N, H, W] on ``device``, True inside the union of an image's boxes.
    """
    counts = torch.bincount(owner, minlength=n)
    slots = int(counts.max()) if len(owner) else 0
    if slots == 0:
        return torch.zeros((n, height, width), dtype=torch.bool, device=device)
    first = torch.cumsum(counts, 0) - counts
    # Empty slots get lo > hi, so they cover nothing.
    bounds = torch.tensor([1, 1, 0, 0], dtype=torch.int64).repeat(n, slots, 1)
    bounds[owner, torch.arange(len(owner)) - first[owner]] = torch.trunc(flat).to(torch.int64)
    bounds = bounds.to(device, non_blocking=True)
    xs = torch.arange(width, device=device)
    ys = torch.arange(height, device=device)
    cols = (xs >= bounds[..., 0:1]) & (xs <= bounds[..., 2:3])
    rows = (ys >= bounds[..., 1:2]) & (ys <= bounds[..., 3:4])
    mask = rows[:, 0, :, None] & cols[:, 0, None, :]
    for slot in range(1, slots):
        mask |= rows[:, slot, :, None] & cols[:, slot, None, :]
    return mask


def _overlay_on_cpu(images: torch.Tensor, boxes: list[torch.Tensor], counts: list[int],
                    colour: torch.Tensor) -> torch.Tensor:
    """Copies the batch and fills its boxes with ``colour``, on torch's number of threads.

    A box is one slice assignment: cheaper than any whole-image mask. Images are copied a
    piece at a time (numpy's copy is a memcpy, faster than torch's copy loop on one
    thread) and their boxes filled while the piece is in cache. With more than one thread,
    on images of :data:`THREAD_IMAGE_VALUES` and more, helper threads start copying at
    once while this thread works out where the boxes are; then it joins them, and each
    takes the next piece as it finishes one (numpy's copies and fills release the GIL). A
    helper fills the pieces it copied before the boxes were known as soon as they are.

    Args:
        images: uint8 [N, C, H, W] on the CPU.
        boxes: Each image's boxes [k, 4] (x1, y1, x2, y2), checked.
        counts: Each image's k.
        colour: uint8 [C] fill value.
    """
    n, channels, height, width = images.shape
    out = torch.empty_like(images, memory_format=torch.contiguous_format)
    pixels, original, value = out.numpy(), images.contiguous().numpy(), colour.numpy()[:, None, None]
    image_values = channels * height * width
    step = max(1, PIECE_VALUES // max(1, image_values))
    pieces = iter(range(0, n, step))  # shared by the threads: each next() is atomic under the GIL
    geometry: list[list[Any]] = []
    known = threading.Event()

    def fill(first: int) -> None:
        spans, owners, first_box = geometry
        for k in range(first_box[first], first_box[min(first + step, n)]):
            x0, y0, x1, y1 = spans[k]
            pixels[owners[k], :, y0:y1, x0:x1] = value

    def copy_and_fill() -> None:
        unfilled = []
        for first in pieces:
            pixels[first:first + step] = original[first:first + step]
            if not known.is_set():
                unfilled.append(first)
                continue
            for piece in unfilled:
                fill(piece)
            unfilled.clear()
            fill(first)
        known.wait()
        for piece in unfilled:
            fill(piece)

    def locate_then_join() -> None:
        try:
            flat, owner = _flatten_boxes(boxes, counts)
            # Truncated corners, ends included (ImageDraw), clipped at 0 (slices clip the far side).
            spans = np.maximum(np.trunc(flat.numpy()).astype(np.int64) + (0, 0, 1, 1), 0).tolist()
            geometry.extend([spans, owner.tolist(), np.searchsorted(owner.numpy(), np.arange(n + 1)).tolist()])
        finally:
            known.set()  # else the helpers would wait for ever; with no geometry they raise
        copy_and_fill()

    threads = torch.get_num_threads() if image_values >= THREAD_IMAGE_VALUES else 1
    run_beside(locate_then_join, [copy_and_fill] * (min(threads, -(-n // step)) - 1))
    return out


@functools.lru_cache(maxsize=None)
def _fill_value(colour: str, channels: int) -> torch.Tensor:
    """face_overlay's colour as uint8 [C] for 1 or 3 channels, worked out once per pair (read only)."""
    rgb = torch.tensor(OVERLAY_COLOURS[colour], dtype=torch.float64)
    if channels == 3:
        return rgb.add(0.5).floor().to(torch.uint8)
    return (rgb @ torch.tensor(_LUMA, dtype=torch.float64)).add(0.5).floor().to(torch.uint8).reshape(1)


@register_mechanism("face_blur")
class FaceBlur(Mechanism):
    """Blurs faces with a soft mask (ImageNet face-obfuscation paper, Appendix B).

    Every box is enlarged by d_i / 10 per side (d_i its diagonal), the union of the
    enlarged boxes is the mask M, image and mask are blurred with radius d_max / 10
    (``PIL GaussianBlur``), and ``I_new = M_b I_b + (1 - M_b) I``. As in the authors'
    released code the mask is an 8-bit image (255 outside faces) and the composite is
    Pillow's ``Image.composite``, so results match that code bit for bit. ``measure`` picks
    d_i: ``diagonal``, the true diagonal the paper defines (default), or ``longer_side``,
    max(width, height), which the released code uses and which made the face-blurred ILSVRC
    images behind the paper's numbers. Images without boxes are returned unchanged. No
    formal guarantee.
    """

    description = "Soft-mask Gaussian blur of enlarged face boxes (radius d_max/10)."
    uses_boxes = True
    params = ParamSpace(
        measure=Param(str, "diagonal", choices=("diagonal", "longer_side"),
                      help="box size d_i: the diagonal (paper, App. B) or the longer side (the authors' released code)"),
    )

    def apply(
        self, images: torch.Tensor, *, generator: Streams, boxes: list[torch.Tensor] | None = None
    ) -> torch.Tensor:
        """Returns the batch with faces blurred."""
        self.check_inputs(images, generator)
        counts = _check_boxes(self.name, images, boxes)
        height, width = images.shape[-2:]
        flat, owner = _flatten_boxes(boxes, counts)
        if not len(flat):
            return images.clone()
        diag = _box_sizes(flat, self.config["measure"])
        grown = flat + torch.stack([-diag, -diag, diag, diag], 1) / 10
        # Every kept box has a positive size, so the images to blur are the boxes' owners.
        faces, where = torch.unique(owner, return_inverse=True)
        radius = torch.zeros(len(faces), dtype=torch.float64).scatter_reduce_(0, where, diag, "amax") / 10
        mask = box_mask(grown, where, len(faces), height, width, images.device)
        keep = (~mask).to(torch.uint8).mul_(255).unsqueeze(1)
        return blend_blurred(images, keep, faces, radius)


@register_mechanism("face_overlay")
class FaceOverlay(Mechanism):
    """Fills face boxes with a flat colour (ImageNet face-obfuscation paper, Sec. 4, App. C).

    Colours: ``mean`` (0.485, 0.456, 0.406) x 255, the ILSVRC mean, or pure red, green
    or blue; grey images get the colour's luma (ITU-R 601, as Pillow's "L" conversion).
    Boxes are rasterised like ``PIL.ImageDraw.rectangle``. No formal guarantee.
    """

    description = "Fill face boxes with a flat colour (ILSVRC mean, red, green or blue)."
    uses_boxes = True
    params = ParamSpace(
        colour=Param(str, "mean", choices=tuple(OVERLAY_COLOURS), help="overlay colour"),
    )

    def fill_value(self, channels: int) -> torch.Tensor:
        """Returns the overlay colour as uint8 [C] for images of ``channels`` channels.

        Raises:
            BenchError: Images that are neither grey nor RGB.
        """
        if channels not in (1, 3):
            raise BenchError(f"mechanism {self.name!r} handles grey or RGB images, got {channels} channels")
        return _fill_value(self.config["colour"], channels).clone()

    def apply(
        self, images: torch.Tensor, *, generator: Streams, boxes: list[torch.Tensor] | None = None
    ) -> torch.Tensor:
        """Returns the batch with faces covered."""
        self.check_inputs(images, generator)
        counts = _check_boxes(self.name, images, boxes)
        n, channels, height, width = images.shape
        colour = self.fill_value(channels)
        if images.device.type == "cpu":
            return _overlay_on_cpu(images, boxes, counts, colour)
        flat, owner = _flatten_boxes(boxes, counts)
        mask = box_mask(flat, owner, n, height, width, images.device).unsqueeze(1)
        return torch.where(mask, colour.to(images.device).view(1, -1, 1, 1), images)
