"""dlib's ResNet face descriptor, with the weights that ship in ``face-recognition-models``.

The network (Davis King, 2017) was trained on about 3 million faces and scores 99.38% on
LFW. It expects a 150 x 150 chip cut by ``dlib.get_face_chip`` from the five landmarks of
dlib's own shape predictor (``shape_predictor_5_face_landmarks.dat``; the 68-point model is
not used: its training data carries a non-commercial restriction). The predictor runs in
each image's face box: MTCNN's where it found one, else the centred square of a tight crop.

``face_recognition_models/__init__.py`` imports ``pkg_resources``, which current setuptools
no longer has, so the ``.dat`` files are located with :func:`importlib.util.find_spec`
without importing that module.
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from bench.errors import BenchError
from bench.faces.align import Located
from bench.faces.recognizer import EXTRA, Recognizer

CHIP = 150
PADDING = 0.25
MODELS = ("shape_predictor_5_face_landmarks.dat", "dlib_face_recognition_resnet_model_v1.dat")


def model_files() -> tuple[Path, Path]:
    """Returns the shape predictor's and the descriptor's files inside ``face_recognition_models``.

    Raises:
        BenchError: The package (or a file of it) is not installed.
    """
    spec = importlib.util.find_spec("face_recognition_models")
    if spec is None or not spec.origin:
        raise BenchError(f"recognizer 'dlib' needs the packages dlib-bin and face-recognition-models ({EXTRA})")
    folder = Path(spec.origin).parent / "models"
    files = tuple(folder / name for name in MODELS)
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise BenchError(f"recognizer 'dlib': face-recognition-models lacks {', '.join(missing)}; reinstall it ({EXTRA})")
    return files  # type: ignore[return-value]


@lru_cache(maxsize=1)
def _models() -> tuple[object, object]:
    try:
        import dlib
    except ImportError:
        raise BenchError(f"recognizer 'dlib' needs the package dlib-bin (or dlib) ({EXTRA})") from None
    predictor, descriptor = model_files()
    return dlib.shape_predictor(str(predictor)), dlib.face_recognition_model_v1(str(descriptor))


class DlibResNet(Recognizer):
    """dlib's 128-d ResNet face descriptor (``face-recognition-models`` weights)."""

    name = "dlib"

    def __init__(self, batch_size: int = 32):
        self.predictor, self.descriptor = _models()
        self.source = "face-recognition-models:" + _version()
        self.batch_size = batch_size

    def chips(self, images: torch.Tensor, located: Located) -> list[np.ndarray]:
        """Returns each image's 150 x 150 RGB chip, aligned by dlib's five landmarks in its face box."""
        import dlib

        rgb = images.expand(-1, 3, -1, -1).permute(0, 2, 3, 1).contiguous().numpy()
        out = []
        for image, box in zip(rgb, located.boxes.tolist()):
            rect = dlib.rectangle(*(int(round(v)) for v in box))
            out.append(dlib.get_face_chip(image, self.predictor(image, rect), size=CHIP, padding=PADDING))
        return out

    def embed(self, images: torch.Tensor, located: Located) -> np.ndarray:
        """Returns L2-normalised 128-d descriptors."""
        chips = self.chips(images, located)
        parts = [np.asarray(self.descriptor.compute_face_descriptor(chips[i : i + self.batch_size]), dtype=np.float32)
                 for i in range(0, len(chips), self.batch_size)]
        vectors = np.concatenate(parts) if parts else np.zeros((0, 128), np.float32)
        return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("face_recognition_models")
    except PackageNotFoundError:
        return "unknown"
