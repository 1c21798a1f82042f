"""An ONNX face recognizer from a local file, run by ``onnxruntime`` (the ArcFace family).

insightface distributes ArcFace recognizers (``w600k_r50.onnx`` and others) as ONNX models
with a 112 x 112 RGB input scaled by ``(x - 127.5) / 127.5``, the face aligned by its five
landmarks to the ArcFace template; that is how they are run here (a face dlib's detector
found, whose eyes only are known, is placed with its eye centres on the template's). A model
with another square input size gets the template scaled to it.
"""

from __future__ import annotations

import numpy as np
import torch

from bench.errors import BenchError
from bench.faces.align import ARCFACE_TEMPLATE, Located, warp
from bench.faces.recognizer import EXTRA, Recognizer, file_digest


class OnnxRecognizer(Recognizer):
    """An ONNX face recognizer (NCHW float input, one embedding output).

    Args:
        path: The ``.onnx`` file.
        batch_size: Faces per call.

    Raises:
        BenchError: onnxruntime is not installed, or the file is not a model it can run
            with a square image input.
    """

    name = "onnx"

    def __init__(self, path: str, batch_size: int = 64):
        try:
            import onnxruntime as ort
        except ImportError:
            raise BenchError(f"recognizer 'onnx' needs the package onnxruntime ({EXTRA})") from None
        options = ort.SessionOptions()
        options.log_severity_level = 3
        try:
            self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own kinds for a file that is no model
            raise BenchError(f"recognizer 'onnx': cannot load {path!r} ({' '.join(str(exc).split())[:160]})") from None
        first = self.session.get_inputs()[0]
        shape = first.shape
        if len(shape) != 4 or shape[1] not in (3, "3") or not isinstance(shape[2], int) or shape[2] != shape[3]:
            raise BenchError(f"recognizer 'onnx': {path!r} takes {shape}, not a square RGB image [N, 3, S, S]")
        self.input, self.size = first.name, int(shape[2])
        self.fixed_batch = shape[0] if isinstance(shape[0], int) else None
        self.source = f"{path.rsplit('/', 1)[-1]}:{file_digest(path)}"
        self.batch_size = self.fixed_batch or batch_size

    def embed(self, images: torch.Tensor, located: Located) -> np.ndarray:
        """Returns L2-normalised embeddings of the aligned faces."""
        template = ARCFACE_TEMPLATE * (self.size / 112.0)
        faces = warp(images.expand(-1, 3, -1, -1), located, template, self.size).numpy()
        parts = []
        for i in range(0, len(faces), self.batch_size):
            chunk = (faces[i : i + self.batch_size].astype(np.float32) - 127.5) / 127.5
            real = len(chunk)
            if self.fixed_batch and real < self.fixed_batch:
                chunk = np.concatenate([chunk, np.zeros((self.fixed_batch - real, *chunk.shape[1:]), np.float32)])
            parts.append(np.asarray(self.session.run(None, {self.input: chunk})[0], np.float32).reshape(len(chunk), -1)[:real])
        out = np.concatenate(parts) if parts else np.zeros((0, 1), np.float32)
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
