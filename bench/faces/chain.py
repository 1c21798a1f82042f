"""The detection chain: where each image's face is when MTCNN alone does not find it.

MTCNN (:func:`bench.faces.align.locate`) misses faces a pretrained recognizer still
identifies: grey lab photographs under dim or uneven light, blurred or restored images.
:func:`locate_faces` tries, per image and in order, until one places the face:

1. the detectors named, of ``mtcnn`` and ``dlib_hog``: dlib's HOG frontal face detector
   (it ships with dlib), run on the grey image upsampled at least once, as dlib's examples
   do, and until the image's short side reaches :data:`HOG_SIDE` pixels, so that a tight
   crop's face fills its 80-pixel window; its eyes are placed by dlib's 5-point shape
   predictor (``face-recognition-models``) in the detected box. MTCNN runs on every image,
   a later detector only on the images the earlier ones missed, so an image MTCNN finds is
   aligned exactly as by MTCNN alone;
2. ``clean``: the face of the same image's clean version, where the caller gives those
   (the clean image's own detection, box and landmarks). Valid only where the released image
   keeps its clean image's geometry (mechanisms that move no pixel), and information about
   the clean image that an adversary attacking released images may not have: the caller
   decides (``face_reid_pretrained.clean_geometry``);
3. ``box``: a fixed box relative to the image (the clean images' typical detected face),
   else the centred square of a tight crop.

Each image's method is kept (:attr:`Located.method`, codes of :data:`METHODS`) and counted.
Every step is deterministic.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch

from bench.errors import BenchError
from bench.faces.align import BOX, CLEAN, DLIB_HOG, METHODS, MTCNN, Located, centred_boxes, locate
from bench.faces.recognizer import EXTRA

__all__ = ["DETECTORS", "HOG_SIDE", "METHODS", "check_detectors", "describe", "hog_locate", "hog_upsampling",
           "load_detectors", "locate_faces", "typical_box"]

DETECTORS = ("mtcnn", "dlib_hog")
"""The face detectors a chain may name, in any order."""
HOG_WINDOW = 80
"""Side in pixels of the faces dlib's frontal face detector scans for at one scale."""
HOG_SIDE = 90
"""dlib's detector upsamples an image until its short side is at least this (a tight crop's face fills the window)."""
MAX_UPSAMPLING = 3


@lru_cache(maxsize=1)
def _dlib_models() -> tuple[object, object]:
    try:
        import dlib
    except ImportError:
        raise BenchError(f"face detector 'dlib_hog' needs the package dlib-bin (or dlib) ({EXTRA}); "
                         "or leave it out: --set face_reid_pretrained.detectors=mtcnn") from None
    from bench.faces.dlib_resnet import model_files

    return dlib.get_frontal_face_detector(), dlib.shape_predictor(str(model_files()[0]))


def check_detectors(detectors: tuple[str, ...], owner: str) -> None:
    """Checks a chain's detector names.

    Raises:
        BenchError: An unknown or repeated name, or none.
    """
    unknown = [d for d in detectors if d not in DETECTORS]
    if unknown or not detectors or len(set(detectors)) != len(detectors):
        raise BenchError(f"{owner}: detectors must be distinct names of {', '.join(DETECTORS)}, in the order tried "
                         f"(got {', '.join(detectors) or 'none'})")


def load_detectors(detectors: tuple[str, ...]) -> None:
    """Loads the named detectors' models once per process (before any work: a missing package is one line).

    Raises:
        BenchError: dlib or its shape predictor is not installed where ``dlib_hog`` is named.
    """
    if "dlib_hog" in detectors:
        _dlib_models()


def grey(images: torch.Tensor) -> np.ndarray:
    """Returns uint8 [N, H, W] grey images (ITU-R 601 luma, as PIL's ``L``) of uint8 [N, 1 or 3, H, W]."""
    if images.shape[1] == 1:
        return np.ascontiguousarray(images[:, 0].numpy())
    weights = torch.tensor([0.299, 0.587, 0.114], dtype=torch.float32).view(1, 3, 1, 1)
    return np.ascontiguousarray((images.float() * weights).sum(1).round().clamp(0, 255).to(torch.uint8).numpy())


def hog_upsampling(height: int, width: int) -> int:
    """Returns how many times dlib's detector doubles an image: once (dlib's examples), more for small images."""
    short = max(min(height, width), 1)
    return int(min(MAX_UPSAMPLING, max(1, math.ceil(math.log2(HOG_SIDE / short)))))


def hog_locate(images: torch.Tensor, *, min_face: int = 20, threshold: float = 0.0) -> Located:
    """Finds the largest face of each image with dlib's HOG detector, and its eyes with dlib's 5-point predictor.

    Args:
        images: uint8 [N, 1 or 3, H, W] (run grey).
        min_face: Images with a shorter side are not searched.
        threshold: Detections scoring below it are dropped (dlib's default 0).

    Returns:
        The faces: ``found`` where one was detected, its box and its eye centres (the other
        three landmarks NaN); method ``dlib_hog`` there, ``box`` (the centred square) elsewhere.
    """
    n, _, h, w = images.shape
    boxes, points = centred_boxes(n, h, w), torch.full((n, 5, 2), float("nan"))
    found = torch.zeros(n, dtype=torch.bool)
    if n and min(h, w) >= min_face:
        detector, predictor = _dlib_models()
        upsample = hog_upsampling(h, w)
        for i, image in enumerate(grey(images)):
            rects, _, _ = detector.run(image, upsample, threshold)
            if not len(rects):
                continue
            rect = max(rects, key=lambda r: (r.width() * r.height(), -r.top(), -r.left()))
            shape = predictor(image, rect)
            marks = np.array([[shape.part(k).x, shape.part(k).y] for k in range(5)], dtype=np.float32)
            # dlib's 5 points: the image-right eye's corners, the image-left eye's, the base of the nose
            points[i, 0], points[i, 1] = torch.from_numpy(marks[2:4].mean(0)), torch.from_numpy(marks[0:2].mean(0))
            boxes[i] = torch.tensor([rect.left(), rect.top(), rect.right() + 1, rect.bottom() + 1], dtype=torch.float32)
            found[i] = True
    return Located(boxes, points, found, torch.where(found, DLIB_HOG, BOX).long())


def typical_box(located: Located, size: tuple[int, int]) -> tuple[float, ...] | None:
    """Returns the median detected box relative to the image size (MTCNN's, else dlib's), or None without detections."""
    h, w = size
    for method in (MTCNN, DLIB_HOG):
        mine = located.method == method
        if bool(mine.any()):
            rel = located.boxes[mine] / torch.tensor([w, h, w, h], dtype=torch.float32)
            return tuple(float(v) for v in rel.median(dim=0).values)
    return None


def locate_faces(images: torch.Tensor, device: str | torch.device = "cpu", *,
                 detectors: tuple[str, ...] = DETECTORS, min_face: int = 20, clean: Located | None = None,
                 box: tuple[float, ...] | None = None) -> Located:
    """Places each image's face by the first method of the chain that finds it (module docstring).

    Args:
        images: uint8 [N, 1 or 3, H, W], on the CPU.
        device: Where MTCNN runs.
        detectors: Detector names of :data:`DETECTORS`, in the order tried.
        min_face: Smallest face side searched for, in pixels.
        clean: The faces of the same images' clean versions, or None: where given, an image
            no detector finds takes its clean version's detected face (method ``clean``).
        box: The fixed box (x1, y1, x2, y2 relative to the image) of images placed by nothing
            else; None: these images' own typical detected box, else the centred square.

    Returns:
        Every image's face and the method that placed it.

    Raises:
        BenchError: ``clean`` of another number of images.
    """
    n, _, h, w = images.shape
    if clean is not None and len(clean.method) != n:
        raise BenchError(f"locate_faces: {n} images but {len(clean.method)} clean faces")
    boxes, points = centred_boxes(n, h, w), torch.full((n, 5, 2), float("nan"))
    found, method = torch.zeros(n, dtype=torch.bool), torch.full((n,), BOX, dtype=torch.long)
    for name in detectors:
        todo = (method == BOX).nonzero().flatten()
        if not len(todo):
            break
        part = images[todo]
        got = locate(part, device, min_face=min_face) if name == "mtcnn" else hog_locate(part, min_face=min_face)
        hit = got.method != BOX
        idx = todo[hit]
        boxes[idx], points[idx], found[idx], method[idx] = (got.boxes[hit], got.points[hit], got.found[hit],
                                                            got.method[hit])
    if box is None:
        box = typical_box(Located(boxes, points, found, method), (h, w))
    if clean is not None:
        idx = ((method == BOX) & ((clean.method == MTCNN) | (clean.method == DLIB_HOG))).nonzero().flatten()
        boxes[idx], points[idx], found[idx], method[idx] = clean.boxes[idx], clean.points[idx], clean.found[idx], CLEAN
    if box is not None:
        rest = method == BOX
        boxes[rest] = torch.tensor(box, dtype=torch.float32) * torch.tensor([w, h, w, h], dtype=torch.float32)
    return Located(boxes, points, found, method)


def describe(counts: dict[str, int]) -> str:
    """Returns ``mtcnn 54, dlib_hog 12, box 9``: the methods that placed some image, in chain order."""
    return ", ".join(f"{name} {counts[name]}" for name in METHODS if counts.get(name))
