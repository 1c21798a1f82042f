"""dlib's ResNet face descriptor, with the weights that ship in ``face-recognition-models``.

The network (Davis King, 2017) was trained on about 3 million faces and scores 99.38% on
LFW. It expects a 150 x 150 chip cut by ``dlib.get_face_chip`` from the five landmarks of
dlib's own shape predictor (``shape_predictor_5_face_landmarks.dat``; the 68-point model is
not used: its training data carries a non-commercial restriction). The predictor runs in
each image's face box: MTCNN's where it found one, else the centred square of a tight crop.

The descriptor runs in torch by default (:mod:`bench.faces.dlib_torch`: the same network,
batched, on the CPU or a GPU, equal to dlib's descriptors to a cosine of 0.9999 or better and
many times faster than dlib-bin, whose wheel has no BLAS); ``engine="dlib"`` runs it in
dlib-bin itself, the reference. The alignment stays dlib's in both.

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
ENGINES = ("torch", "dlib")
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
    """dlib's 128-d ResNet face descriptor (``face-recognition-models`` weights).

    Args:
        batch_size: Chips per call (the torch engine runs at most ``dlib_torch.CPU_CHUNK`` a pass on the CPU).
        engine: ``torch`` (:mod:`bench.faces.dlib_torch`) or ``dlib`` (dlib-bin itself, the reference).
        device: Where the torch engine runs (``cpu``, ``cuda``, ...); it uses torch's intra-op
            thread setting on the CPU (:func:`bench.nn.threads.cpu_threads`).
        cache_dir: A cache directory to keep the converted weights in (``weights/dlib``);
            None converts them in memory (a fraction of a second).

    Raises:
        BenchError: A missing package or file, or an unknown engine.
    """

    name = "dlib"

    def __init__(self, batch_size: int = 32, engine: str = "torch", device: str | torch.device = "cpu",
                 cache_dir: str | Path | None = None):
        if engine not in ENGINES:
            raise BenchError(f"recognizer 'dlib': unknown engine {engine!r} (available: {', '.join(ENGINES)})")
        self.predictor, self.descriptor = _models()
        self.engine, self.device = engine, torch.device(device)
        self.source = "face-recognition-models:" + _version() + (":torch" if engine == "torch" else "")
        self.batch_size = batch_size
        self.net = None
        if engine == "torch":
            from bench.faces import dlib_torch

            self.net = dlib_torch.load(model_files()[1], self.device, cache_dir)

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
        vectors = self.describe(self.chips(images, located))
        return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)

    def describe(self, chips: list[np.ndarray] | np.ndarray) -> np.ndarray:
        """Returns the raw (not normalised) float32 descriptors [N, 128] of 150 x 150 RGB uint8 chips."""
        if not len(chips):
            return np.zeros((0, 128), np.float32)
        if self.net is None:
            parts = [np.asarray(self.descriptor.compute_face_descriptor(list(chips[i : i + self.batch_size])),
                                dtype=np.float32) for i in range(0, len(chips), self.batch_size)]
            return np.concatenate(parts)
        from bench.faces.dlib_torch import describe

        return describe(self.net, np.stack(chips), self.batch_size)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("face_recognition_models")
    except PackageNotFoundError:
        return "unknown"
