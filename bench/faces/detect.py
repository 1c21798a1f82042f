"""Face boxes for datasets that have none: MTCNN detection and its recall against truth.

The MTCNN weights ship inside the ``facenet_pytorch`` package; nothing is downloaded.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch

from bench.errors import BenchError


@lru_cache(maxsize=4)
def _mtcnn(device: str, min_face: int):
    try:
        from facenet_pytorch import MTCNN
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise BenchError("face detection needs facenet-pytorch (pip install facenet-pytorch)") from exc
    return MTCNN(keep_all=True, min_face_size=min_face, device=torch.device(device)).eval()


def detect_boxes(
    images: torch.Tensor,
    device: str | torch.device = "cpu",
    *,
    min_face: int = 12,
    min_prob: float = 0.9,
    batch_size: int = 64,
) -> list[torch.Tensor]:
    """Detects faces with MTCNN (facenet-pytorch, packaged weights).

    Args:
        images: uint8 [N, C, H, W], grey (C = 1) or RGB.
        device: Where the detector runs.
        min_face: Smallest face side in pixels MTCNN searches for.
        min_prob: Detections with a lower face probability are dropped.
        batch_size: Images per detector call.

    Returns:
        One float32 tensor [k_i, 4] of (x1, y1, x2, y2) pixel boxes per image, on the CPU.

    Raises:
        BenchError: Images that are not uint8 [N, 1 or 3, H, W].
    """
    if images.dtype != torch.uint8 or images.dim() != 4 or images.shape[1] not in (1, 3):
        raise BenchError(f"detect_boxes expects uint8 [N, 1 or 3, H, W], got {images.dtype} {tuple(images.shape)}")
    detector = _mtcnn(str(torch.device(device)), int(min_face))
    out: list[torch.Tensor] = []
    for start in range(0, images.shape[0], batch_size):
        batch = images[start : start + batch_size].expand(-1, 3, -1, -1)
        hwc = batch.permute(0, 2, 3, 1).float()
        with torch.no_grad():
            boxes, probs = detector.detect(hwc)
        for found, prob in zip(boxes, probs):
            out.append(_keep(found, prob, min_prob))
    return out


def _keep(found, prob, min_prob: float) -> torch.Tensor:
    if found is None or prob is None or any(p is None for p in np.asarray(prob, dtype=object).ravel()):
        return torch.zeros((0, 4), dtype=torch.float32)
    boxes = torch.from_numpy(np.asarray(found, dtype=np.float32).reshape(-1, 4))
    scores = torch.from_numpy(np.asarray(prob, dtype=np.float32).reshape(-1))
    return boxes[scores >= min_prob]


def box_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Returns the IoU matrix [len(a), len(b)] of two sets of (x1, y1, x2, y2) boxes."""
    a, b = a.to(torch.float64), b.to(torch.float64)
    area_a = (a[:, 2] - a[:, 0]).clamp(min=0) * (a[:, 3] - a[:, 1]).clamp(min=0)
    area_b = (b[:, 2] - b[:, 0]).clamp(min=0) * (b[:, 3] - b[:, 1]).clamp(min=0)
    lt = torch.maximum(a[:, None, :2], b[None, :, :2])
    rb = torch.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    union = area_a[:, None] + area_b[None, :] - inter
    return torch.where(union > 0, inter / union.clamp(min=1e-12), torch.zeros_like(inter))


def _matched(pred: torch.Tensor, truth: torch.Tensor, iou: float) -> torch.Tensor:
    """Returns, per true box, whether a predicted box matches it (one-to-one, greedy by IoU)."""
    hit = torch.zeros(len(truth), dtype=torch.bool)
    if not len(pred) or not len(truth):
        return hit
    overlap = box_iou(truth, pred)
    while True:
        best = overlap.max()
        if best < iou:
            return hit
        t, p = divmod(int(overlap.argmax()), overlap.shape[1])
        hit[t] = True
        overlap[t, :] = -1
        overlap[:, p] = -1


def face_hits(pred: list[torch.Tensor], truth: list[torch.Tensor], iou: float = 0.5) -> torch.Tensor:
    """Returns, for every true box (image by image, in order), whether a predicted box matches it.

    Matching is one-to-one and greedy by IoU within each image; a hit needs IoU >= ``iou``.

    Raises:
        ValueError: Lists of different lengths.
    """
    if len(pred) != len(truth):
        raise ValueError(f"{len(pred)} predicted and {len(truth)} true box lists")
    flags = [_matched(p.reshape(-1, 4), t.reshape(-1, 4), iou) for p, t in zip(pred, truth)]
    return torch.cat(flags) if flags else torch.zeros(0, dtype=torch.bool)


def detector_recall(pred: list[torch.Tensor], truth: list[torch.Tensor], iou: float = 0.5) -> float:
    """Returns the fraction of true boxes matched one-to-one by a predicted box with IoU >= ``iou``.

    Matching is greedy by IoU within each image.

    Args:
        pred: Predicted boxes per image, [k_i, 4].
        truth: True boxes per image, [t_i, 4].
        iou: Smallest IoU that counts as a hit.

    Returns:
        Recall in [0, 1]; NaN when there are no true boxes.

    Raises:
        ValueError: Lists of different lengths.
    """
    hits = face_hits(pred, truth, iou)
    return float(hits.float().mean()) if len(hits) else math.nan
