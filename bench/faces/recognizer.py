"""What every pretrained face recognizer is: the interface its backends implement, and how their weights are keyed."""

from __future__ import annotations

import abc
import hashlib
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch

from bench.faces.align import Located

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
            located: Their faces as :func:`bench.faces.chain.locate_faces` (or
                :func:`bench.faces.align.locate`, MTCNN alone) placed them.
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
