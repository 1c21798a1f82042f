"""facenet-pytorch's Inception-ResNet-v1 from a local state dict (VGGFace2 or CASIA-WebFace).

It is run as facenet-pytorch runs it: MTCNN's face box cut square and resized to 160 x 160,
pixels scaled by ``(x - 127.5) / 128``; 512-d L2-normalised output.
"""

from __future__ import annotations

import numpy as np
import torch

from bench.errors import BenchError
from bench.faces.align import Located, crop
from bench.faces.recognizer import Recognizer, file_digest

SIZE = 160


class FaceNet(Recognizer):
    """Inception-ResNet-v1 (facenet-pytorch) with weights read from a local file.

    Args:
        weights: A facenet-pytorch state dict (a ``logits.*`` head, if any, is ignored).
        batch_size: Faces per forward pass.

    Raises:
        BenchError: The file is not readable as such a state dict.
    """

    name = "facenet"

    def __init__(self, weights: str, batch_size: int = 64):
        from facenet_pytorch import InceptionResnetV1

        try:
            state = torch.load(weights, map_location="cpu", weights_only=True)
        except Exception as exc:  # torch raises many kinds for a file that is no checkpoint
            raise BenchError(f"recognizer 'facenet': cannot read {weights!r} as a state dict "
                             f"({type(exc).__name__})") from None
        if not isinstance(state, dict):
            raise BenchError(f"recognizer 'facenet': {weights!r} is not a state dict")
        self.net = InceptionResnetV1(pretrained=None, classify=False).eval()
        state = {k: v for k, v in state.items() if not str(k).startswith("logits.")}
        try:
            missing, unexpected = self.net.load_state_dict(state, strict=False)
        except RuntimeError:
            missing, unexpected = ["(shapes differ)"], []
        if unexpected or [k for k in missing if not k.startswith("logits")]:
            raise BenchError(f"recognizer 'facenet': {weights!r} is not an Inception-ResNet-v1 state dict")
        self.source = f"{weights.rsplit('/', 1)[-1]}:{file_digest(weights)}"
        self.batch_size = batch_size

    @torch.no_grad()
    def embed(self, images: torch.Tensor, located: Located) -> np.ndarray:
        """Returns L2-normalised 512-d embeddings of the face boxes."""
        faces = crop(images.expand(-1, 3, -1, -1), located, SIZE)
        parts = [self.net((faces[i : i + self.batch_size].float() - 127.5) / 128.0)
                 for i in range(0, len(faces), self.batch_size)]
        out = torch.cat(parts) if parts else torch.zeros((0, 512))
        return torch.nn.functional.normalize(out, dim=1).numpy().astype(np.float32)
