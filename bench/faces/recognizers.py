"""Pretrained face recognizers: the attacker the field uses, offline.

A recognizer maps face images to L2-normalised embeddings without ever training on the
benchmark's data. Three backends sit behind one interface (:class:`Recognizer`):

- ``dlib``: dlib's ResNet face descriptor (about 3 million faces; 99.38% on LFW), whose
  weights ship inside the PyPI package ``face-recognition-models``; nothing to supply.
  Faces are aligned by dlib's own 5-point shape predictor (``dlib-bin``); the network runs
  as a torch port of dlib's (:mod:`bench.faces.dlib_torch`), batched, on the cell's device.
- ``facenet``: facenet-pytorch's Inception-ResNet-v1 from a local state dict (VGGFace2 or
  CASIA-WebFace), on MTCNN's face box.
- ``onnx``: an ONNX face recognizer from a local file through ``onnxruntime`` (the
  ArcFace family as insightface distributes it: 112 x 112 input, aligned by MTCNN's five
  landmarks to the ArcFace template).

Weights are never downloaded; a missing package or file is one line naming what to supply.
Faces are detected once per image set by the detection chain
(:func:`bench.faces.chain.locate_faces`: MTCNN, then dlib's HOG detector, then a fixed box);
an image no detector finds is cut at the set's typical face box, else taken to be a tight
crop and centred.
"""

from __future__ import annotations

from pathlib import Path

from bench.errors import BenchError
from bench.faces.recognizer import BACKENDS, EXTRA, Recognizer, file_digest

__all__ = ["BACKENDS", "EXTRA", "Recognizer", "file_digest", "load_recognizer"]

def load_recognizer(name: str, weights: str | None = None, device: str = "cpu") -> Recognizer:
    """Returns a backend, loaded from installed packages or a local file.

    Args:
        name: ``dlib``, ``facenet`` or ``onnx``.
        weights: The local weights file (``facenet``: a state dict; ``onnx``: a model);
            ``dlib`` takes none.
        device: Where ``dlib``'s network runs (its torch port; alignment stays in dlib).

    Raises:
        BenchError: An unknown backend, a missing package or weights file, or a file that
            is not such a model.
    """
    if name == "dlib":
        from bench.faces.dlib_resnet import DlibResNet

        return DlibResNet(device=device)
    if name in ("facenet", "onnx"):
        if not weights:
            what = "an Inception-ResNet-v1 state dict" if name == "facenet" else "an ONNX face recognizer"
            raise BenchError(f"recognizer {name!r} needs {what}: --set face_reid_pretrained.{name}_weights=PATH "
                             "(weights are never downloaded)")
        if not Path(weights).is_file():
            raise BenchError(f"recognizer {name!r}: weights file {weights!r} does not exist")
        if name == "facenet":
            from bench.faces.facenet import FaceNet

            return FaceNet(weights)
        from bench.faces.onnx_model import OnnxRecognizer

        return OnnxRecognizer(weights)
    raise BenchError(f"unknown recognizer {name!r} (available: {', '.join(BACKENDS)})")
