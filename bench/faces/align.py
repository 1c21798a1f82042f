"""Where the faces are, and crops of them the way each recognizer expects.

:func:`locate` runs MTCNN (facenet-pytorch's packaged weights) once over an image set and
keeps, per image, its largest confident face: the box and the five landmarks (eye centres,
nose tip, mouth corners). An image where no face is found is taken to be a tight crop (the
benchmarks' face crops, aligned datasets such as CelebA's): its box is the centred square
of the image and it has no landmarks (:mod:`bench.faces.chain` tries other detectors first).
:func:`warp` maps landmarks to a recognizer's template by a least-squares similarity
transform (vectorised, one ``grid_sample``); :func:`crop` cuts and resizes boxes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

ARCFACE_TEMPLATE = torch.tensor([[38.2946, 51.6963], [73.5318, 51.5014], [56.0252, 71.7366],
                                 [41.5493, 92.3655], [70.7299, 92.2041]])
"""insightface's five-point template of a 112 x 112 ArcFace input (eyes, nose, mouth corners)."""
METHODS = ("mtcnn", "dlib_hog", "clean", "box")
"""How an image's face was placed, by code: detected by MTCNN, by dlib's HOG detector, taken from
the image's clean version, or a fixed box (:mod:`bench.faces.chain`)."""
MTCNN, DLIB_HOG, CLEAN, BOX = range(len(METHODS))


@dataclass(frozen=True)
class Located:
    """The face of each image of a set.

    Attributes:
        boxes: float32 [N, 4] (x1, y1, x2, y2): the detected face, else the centred square.
        points: float32 [N, 5, 2] landmarks in MTCNN's order (eye centres, nose tip, mouth
            corners); NaN where unknown: all five where no face was detected, the last three
            where only the eyes are known (a dlib detection).
        found: bool [N]: whether the face has landmarks to align on (at least the eyes).
        method: int64 [N] codes of :data:`METHODS`; None: MTCNN where ``found``, else a box.
    """

    boxes: torch.Tensor
    points: torch.Tensor
    found: torch.Tensor
    method: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.method is None:
            object.__setattr__(self, "method", torch.where(self.found, MTCNN, BOX).long())

    def subset(self, index: torch.Tensor) -> "Located":
        """Returns the faces of some images."""
        return Located(self.boxes[index], self.points[index], self.found[index], self.method[index])

    def counts(self) -> dict[str, int]:
        """Returns how many images each method of :data:`METHODS` placed."""
        tally = torch.bincount(self.method, minlength=len(METHODS)).tolist()
        return dict(zip(METHODS, tally))


def centred_boxes(n: int, height: int, width: int) -> torch.Tensor:
    """Returns the centred square box of an image, repeated ``n`` times."""
    side = min(height, width)
    x1, y1 = (width - side) / 2, (height - side) / 2
    return torch.tensor([[x1, y1, x1 + side, y1 + side]], dtype=torch.float32).repeat(n, 1)


def locate(images: torch.Tensor, device: str | torch.device = "cpu", *, min_face: int = 20, min_prob: float = 0.9,
           batch_size: int = 64) -> Located:
    """Finds the largest confident face of each image with MTCNN.

    Args:
        images: uint8 [N, 1 or 3, H, W].
        device: Where MTCNN runs.
        min_face: Smallest face side searched for, in pixels (smaller images are not searched).
        min_prob: Detections with a lower face probability are ignored.
        batch_size: Images per detector call.
    """
    from bench.faces.detect import _mtcnn

    n, _, h, w = images.shape
    boxes, points = centred_boxes(n, h, w), torch.full((n, 5, 2), float("nan"))
    found = torch.zeros(n, dtype=torch.bool)
    if min(h, w) < min_face:
        return Located(boxes, points, found)
    detector = _mtcnn(str(torch.device(device)), int(min_face))
    for start in range(0, n, batch_size):
        hwc = images[start : start + batch_size].expand(-1, 3, -1, -1).permute(0, 2, 3, 1).float()
        with torch.no_grad():
            got, probs, marks = detector.detect(hwc, landmarks=True)
        for i, (b, p, m) in enumerate(zip(got, probs, marks)):
            if b is None or p is None:
                continue
            b, p, m = (np.asarray(b, dtype=np.float32).reshape(-1, 4), np.asarray(p, dtype=np.float32).reshape(-1),
                       np.asarray(m, dtype=np.float32).reshape(-1, 5, 2))
            keep = np.flatnonzero(p >= min_prob)
            if not len(keep):
                continue
            area = (b[keep, 2] - b[keep, 0]) * (b[keep, 3] - b[keep, 1])
            best = keep[int(np.argmax(area))]
            boxes[start + i], points[start + i] = torch.from_numpy(b[best]), torch.from_numpy(m[best])
            found[start + i] = True
    return Located(boxes, points, found)


def similarity(source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Returns the least-squares similarity transforms mapping ``source`` points onto ``target`` points.

    Points are complex numbers z = x + iy; the transform is z -> a z + b with complex a
    (scale and rotation) and b (translation), fitted in closed form (Umeyama in 2-D).

    Args:
        source: [N, K, 2] or [K, 2] points.
        target: [N, K, 2] points.

    Returns:
        float32 [N, 2, 3] pixel-space affine matrices.
    """
    src = torch.complex(source[..., 0].double(), source[..., 1].double()).expand(target.shape[:-1])
    dst = torch.complex(target[..., 0].double(), target[..., 1].double())
    ms, md = src.mean(-1, keepdim=True), dst.mean(-1, keepdim=True)
    cs, cd = src - ms, dst - md
    a = (cd * cs.conj()).sum(-1) / (cs.abs() ** 2).sum(-1)
    b = md.squeeze(-1) - a * ms.squeeze(-1)
    rows = [torch.stack([a.real, -a.imag, b.real], -1), torch.stack([a.imag, a.real, b.imag], -1)]
    return torch.stack(rows, 1).float()


def sample(images: torch.Tensor, matrices: torch.Tensor, size: int) -> torch.Tensor:
    """Returns uint8 [N, C, size, size] crops: output pixel (x, y) reads the input at ``matrices @ (x, y, 1)``.

    Pixel centres are at integer coordinates; bilinear, zeros outside the image.
    """
    n, _, h, w = images.shape
    to_norm_in = torch.tensor([[2 / w, 0, 1 / w - 1], [0, 2 / h, 1 / h - 1], [0, 0, 1]])
    from_norm_out = torch.tensor([[size / 2, 0, (size - 1) / 2], [0, size / 2, (size - 1) / 2], [0, 0, 1]])
    full = torch.cat([matrices, torch.tensor([[[0.0, 0.0, 1.0]]]).expand(n, 1, 3)], 1)
    theta = (to_norm_in @ full @ from_norm_out)[:, :2]
    grid = F.affine_grid(theta, [n, images.shape[1], size, size], align_corners=False)
    out = F.grid_sample(images.float(), grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    return out.round().clamp(0, 255).to(torch.uint8)


def warp(images: torch.Tensor, located: Located, template: torch.Tensor, size: int) -> torch.Tensor:
    """Aligns faces to a five-point template (detected ones) or crops their box (the others).

    A face whose five landmarks are known is fitted on all five (least squares); one whose
    eyes only are known (a dlib detection) is placed with its eye centres on the template's.

    Args:
        images: uint8 [N, C, H, W].
        located: Their faces.
        template: [5, 2] landmark positions in the ``size`` x ``size`` output.
        size: Side of the output.
    """
    matrices = box_matrices(located.boxes, size)
    full = located.found & located.points.isfinite().flatten(1).all(1)
    if bool(full.any()):
        idx = full.nonzero().flatten()
        matrices[idx] = similarity(template, located.points[idx])
    eyes = located.found & ~full
    if bool(eyes.any()):
        idx = eyes.nonzero().flatten()
        matrices[idx] = similarity(template[:2], located.points[idx, :2])
    return sample(images, matrices, size)


def box_matrices(boxes: torch.Tensor, size: int, margin: float = 0.0) -> torch.Tensor:
    """Returns the pixel-space affine matrices that crop ``boxes`` (widened by ``margin`` of their side) to a square."""
    x1, y1, x2, y2 = boxes.unbind(1)
    side = torch.maximum(x2 - x1, y2 - y1) * (1 + margin)
    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
    scale = side / size
    zero = torch.zeros_like(scale)
    # output pixel centre x maps to cx + (x - (size - 1) / 2) * scale
    rows = [torch.stack([scale, zero, cx - (size - 1) / 2 * scale], -1),
            torch.stack([zero, scale, cy - (size - 1) / 2 * scale], -1)]
    return torch.stack(rows, 1) - torch.tensor([[0, 0, 0.5], [0, 0, 0.5]])


def crop(images: torch.Tensor, located: Located, size: int, margin: float = 0.0) -> torch.Tensor:
    """Returns uint8 [N, C, size, size] crops of each image's face box (widened by ``margin``)."""
    return sample(images, box_matrices(located.boxes, size, margin), size)
