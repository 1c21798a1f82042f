"""Face embedding networks for the re-identification adversary."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bench.errors import BenchError
from bench.nn.images import as_rgb


def _stage(cin: int, cout: int) -> nn.Sequential:
    # The last pool runs before its ReLU: they commute exactly (see bench.nn.conv4.conv_block).
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
        nn.Conv2d(cout, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.MaxPool2d(2),
        nn.ReLU(inplace=True),
    )


class SmallFaceNet(nn.Module):
    """A compact FaceNet-style embedder for CPU profiles: 4 VGG stages, 128-d output.

    Args:
        num_classes: Identities of the training head.
        width: Filters of the first stage (doubled per stage).
        embed_dim: Embedding size.
    """

    def __init__(self, num_classes: int, width: int = 32, embed_dim: int = 128):
        super().__init__()
        widths = [3, width, width * 2, width * 4, width * 8]
        self.features = nn.Sequential(*(_stage(a, b) for a, b in zip(widths, widths[1:])))
        self.embedding = nn.Sequential(nn.Linear(widths[-1], embed_dim, bias=False), nn.BatchNorm1d(embed_dim))
        self.head = nn.Linear(embed_dim, num_classes)

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """Returns L2-normalised embeddings [N, embed_dim] (grey inputs repeated to RGB)."""
        return F.normalize(self.embedding(self.features(as_rgb(x)).mean(dim=(2, 3))), dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Returns identity logits (training; grey inputs repeated to RGB)."""
        return self.head(self.embedding(self.features(as_rgb(x)).mean(dim=(2, 3))))


class FaceNetInception(nn.Module):
    """Inception-ResNet-v1 from facenet-pytorch with a fine-tuning head.

    Weights are read from a local file when given (a facenet-pytorch state dict such as the
    VGGFace2 checkpoint); they are never downloaded.

    Args:
        num_classes: Identities of the fine-tuning head.
        weights: Path of a state dict, or None to train from scratch.
    """

    def __init__(self, num_classes: int, weights: str | None = None):
        super().__init__()
        from facenet_pytorch import InceptionResnetV1

        self.net = InceptionResnetV1(pretrained=None, classify=False)
        if weights:
            try:
                state = torch.load(weights, map_location="cpu", weights_only=True)
            except (OSError, RuntimeError) as exc:
                raise BenchError(f"face_reid: cannot read weights {weights!r}: {exc}") from None
            state = {k: v for k, v in state.items() if not k.startswith("logits.")}
            missing, unexpected = self.net.load_state_dict(state, strict=False)
            if unexpected or [k for k in missing if not k.startswith("logits")]:
                raise BenchError(f"face_reid: {weights!r} is not an Inception-ResNet-v1 state dict")
        self.head = nn.Linear(512, num_classes)

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """Returns L2-normalised 512-d embeddings (grey inputs repeated to RGB)."""
        return self.net(as_rgb(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Returns identity logits (fine-tuning; grey inputs repeated to RGB)."""
        return self.head(self.net(as_rgb(x)))


def build_face_model(kind: str, num_classes: int, weights: str | None = None, width: int = 32) -> nn.Module:
    """Returns an untrained (or locally initialised) face embedder.

    Args:
        kind: ``small_cnn`` or ``inception_resnet_v1``.
        num_classes: Identities of the training head.
        weights: Local state dict for Inception-ResNet-v1.
        width: First-stage filters of the small CNN.

    Raises:
        BenchError: An unknown model kind.
    """
    if kind == "small_cnn":
        return SmallFaceNet(num_classes, width=width)
    if kind == "inception_resnet_v1":
        return FaceNetInception(num_classes, weights)
    raise BenchError(f"face_reid: unknown model {kind!r} (available: small_cnn, inception_resnet_v1)")
