"""Pretrained face recognizers: the attacker the field uses, offline.

A recognizer maps face images to L2-normalised embeddings without ever training on the
benchmark's data. Three backends sit behind one interface (:class:`Recognizer`):

- ``dlib``: dlib's ResNet face descriptor (about 3 million faces; 99.38% on LFW), whose
  weights ship inside the PyPI package ``face-recognition-models`` (run by ``dlib-bin``);
  nothing to supply. Faces are aligned by dlib's own 5-point shape predictor.
- ``facenet``: facenet-pytorch's Inception-ResNet-v1 from a local state dict (VGGFace2 or
  CASIA-WebFace), on MTCNN's face box.
- ``onnx``: an ONNX face recognizer from a local file through ``onnxruntime`` (the
  ArcFace family as insightface distributes it: 112 x 112 input, aligned by MTCNN's five
  landmarks to the ArcFace template).

Weights are never downloaded; a missing package or file is one line naming what to supply.
Faces are detected once per image set (:func:`bench.recognizers.align.locate`); an image
where MTCNN finds no face is taken to be a tight crop and centred.
"""

from __future__ import annotations

import abc
import hashlib
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch

from bench.errors import BenchError
from bench.recognizers.align import Located

BACKENDS = ("dlib", "facenet", "onnx")
EXTRA = "pip install 'privbench[faces]'"
"""How a user installs the optional recognizers' packages."""


class Recognizer(abc.ABC):
    """A pretrained face recognizer.

    Attributes:
        name: Backend name (``dlib``, ``facenet``, ``onnx``).
        source: What its weights are (a package or a file), for results and cache keys.
    """

    name: ClassVar[str] = ""
    source: str = ""

    @abc.abstractmethod
    def embed(self, images: torch.Tensor, located: Located) -> np.ndarray:
        """Returns L2-normalised float32 embeddings [N, D] of uint8 images [N, C, H, W].

        Args:
            images: The images, grey (C = 1) or RGB, on the CPU.
            located: Their faces as :func:`bench.recognizers.align.locate` found them.
        """

    def identity(self) -> str:
        """Returns a digest of what its embeddings depend on (backend and weights' bytes)."""
        return f"{self.name}:{self.source}"


def file_digest(path: str | Path) -> str:
    """Returns the SHA-256 of a file (weights are keyed by content, not by path)."""
    h = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()[:16]


def load_recognizer(name: str, weights: str | None = None) -> Recognizer:
    """Returns a backend, loaded from installed packages or a local file.

    Args:
        name: ``dlib``, ``facenet`` or ``onnx``.
        weights: The local weights file (``facenet``: a state dict; ``onnx``: a model);
            ``dlib`` takes none.

    Raises:
        BenchError: An unknown backend, a missing package or weights file, or a file that
            is not such a model.
    """
    if name == "dlib":
        from bench.recognizers.dlib_resnet import DlibResNet

        return DlibResNet()
    if name in ("facenet", "onnx"):
        if not weights:
            what = "an Inception-ResNet-v1 state dict" if name == "facenet" else "an ONNX face recognizer"
            raise BenchError(f"recognizer {name!r} needs {what}: --set face_reid_pretrained.{name}_weights=PATH "
                             "(weights are never downloaded)")
        if not Path(weights).is_file():
            raise BenchError(f"recognizer {name!r}: weights file {weights!r} does not exist")
        if name == "facenet":
            from bench.recognizers.facenet import FaceNet

            return FaceNet(weights)
        from bench.recognizers.onnx_model import OnnxRecognizer

        return OnnxRecognizer(weights)
    raise BenchError(f"unknown recognizer {name!r} (available: {', '.join(BACKENDS)})")
