"""Face obfuscation inside given face boxes (ImageNet face-obfuscation paper)."""

from __future__ import annotations

import math

import torch

from bench.errors import BenchError
from bench.interfaces import Mechanism, Param, ParamSpace, Streams
from bench.registry import register_mechanism
from mechanisms._ops import gaussian_blur

OVERLAY_COLOURS: dict[str, tuple[float, float, float]] = {
    "mean": (0.485 * 255, 0.456 * 255, 0.406 * 255),
    "red": (255.0, 0.0, 0.0),
    "green": (0.0, 255.0, 0.0),
    "blue": (0.0, 0.0, 255.0),
}
"""Overlay colours; ``mean`` is the average ILSVRC training colour (paper, Sec. 4)."""

_LUMA = (0.299, 0.587, 0.114)


def _check_boxes(owner: str, images: torch.Tensor, boxes: list[torch.Tensor] | None) -> None:
    if boxes is None:
        raise BenchError(
            f"mechanism {owner!r} needs face boxes, but none were given: use a dataset with boxes "
            "or detect them first with bench.faces.detect_boxes"
        )
    if len(boxes) != images.shape[0]:
        raise BenchError(f"mechanism {owner!r} got boxes for {len(boxes)} images, expected {images.shape[0]}")
    for b in boxes:
        if b.dim() != 2 or b.shape[1] != 4:
            raise BenchError(f"mechanism {owner!r}: face boxes must be tensors [k, 4] (x1, y1, x2, y2), got {tuple(b.shape)}")


def _flatten_boxes(boxes: list[torch.Tensor], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns all non-degenerate boxes as float64 [B, 4] and the image each belongs to [B]."""
    counts = torch.tensor([len(b) for b in boxes], dtype=torch.int64)
    flat = torch.cat([b.detach().to("cpu", torch.float64).reshape(-1, 4) for b in boxes]) if boxes else torch.zeros(0, 4, dtype=torch.float64)
    owner = torch.repeat_interleave(torch.arange(len(boxes)), counts)
    keep = (flat[:, 0] < flat[:, 2]) & (flat[:, 1] < flat[:, 3])
    return flat[keep].to(device), owner[keep].to(device)


def _box_sizes(flat: torch.Tensor, measure: str) -> torch.Tensor:
    """Returns each box's size d_i: its diagonal (App. B) or its longer side (the released code)."""
    width, height = flat[:, 2] - flat[:, 0], flat[:, 3] - flat[:, 1]
    return torch.hypot(width, height) if measure == "diagonal" else torch.maximum(width, height)


def box_mask(flat: torch.Tensor, owner: torch.Tensor, n: int, height: int, width: int) -> torch.Tensor:
    """Rasterises boxes like ``PIL.ImageDraw.rectangle``: coordinates truncated, ends included.

    Args:
        flat: float64 [B, 4] boxes (x1, y1, x2, y2).
        owner: int64 [B] index of each box's image, in non-decreasing order.
        n: Number of images.
        height: Image height.
        width: Image width.

    Returns:
        bool [N, H, W], True inside the union of an image's boxes.
    """
    device = flat.device
    counts = torch.bincount(owner, minlength=n)
    slots = int(counts.max()) if len(owner) else 0
    if slots == 0:
        return torch.zeros((n, height, width), dtype=torch.bool, device=device)
    first = torch.cumsum(counts, 0) - counts
    padded = torch.full((n, slots, 4), math.nan, dtype=torch.float64, device=device)
    padded[owner, torch.arange(len(owner), device=device) - first[owner]] = flat
    lo, hi = torch.trunc(padded[..., :2]), torch.trunc(padded[..., 2:])
    xs = torch.arange(width, device=device, dtype=torch.float64)
    ys = torch.arange(height, device=device, dtype=torch.float64)
    cols = (xs >= lo[..., :1]) & (xs <= hi[..., :1])
    rows = (ys >= lo[..., 1:]) & (ys <= hi[..., 1:])
    return (rows.unsqueeze(-1) & cols.unsqueeze(-2)).any(1)


def _div255(values: torch.Tensor) -> torch.Tensor:
    """Pillow's exact rounding of v / 255 for v in [0, 255^2]."""
    t = values + 128
    return ((t >> 8) + t) >> 8


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
        _check_boxes(self.name, images, boxes)
        n, _, height, width = images.shape
        flat, owner = _flatten_boxes(boxes, images.device)
        out = images.clone()
        if not len(flat):
            return out
        diag = _box_sizes(flat, self.config["measure"])
        grown = flat + torch.stack([-diag, -diag, diag, diag], 1) / 10
        radius = torch.zeros(n, dtype=torch.float64, device=images.device).scatter_reduce_(0, owner, diag, "amax") / 10
        faces = (radius > 0).nonzero().flatten()
        keep = (~box_mask(grown, owner, n, height, width)[faces]).to(torch.uint8).mul_(255).unsqueeze(1)
        keep = gaussian_blur(keep, radius[faces].cpu()).to(torch.int32)
        chosen = images[faces]
        blurred = gaussian_blur(chosen, radius[faces].cpu()).to(torch.int32)
        out[faces] = _div255(blurred * (255 - keep) + chosen.to(torch.int32) * keep).to(torch.uint8)
        return out


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
        rgb = torch.tensor(OVERLAY_COLOURS[self.config["colour"]], dtype=torch.float64)
        if channels == 3:
            return rgb.add(0.5).floor().to(torch.uint8)
        if channels == 1:
            return (rgb @ torch.tensor(_LUMA, dtype=torch.float64)).add(0.5).floor().to(torch.uint8).reshape(1)
        raise BenchError(f"mechanism {self.name!r} handles grey or RGB images, got {channels} channels")

    def apply(
        self, images: torch.Tensor, *, generator: Streams, boxes: list[torch.Tensor] | None = None
    ) -> torch.Tensor:
        """Returns the batch with faces covered."""
        self.check_inputs(images, generator)
        _check_boxes(self.name, images, boxes)
        n, channels, height, width = images.shape
        colour = self.fill_value(channels).to(images.device)
        flat, owner = _flatten_boxes(boxes, images.device)
        mask = box_mask(flat, owner, n, height, width).unsqueeze(1)
        return torch.where(mask, colour.view(1, -1, 1, 1), images)
