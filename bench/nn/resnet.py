"""ResNet backbones with a re-identification head (BNNeck) or an attribute head.

Backbones are torchvision ResNets without their classifier. ImageNet weights are read
from a local file when one is given; they are never downloaded.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from bench.errors import BenchError
from bench.nn.images import as_rgb

ARCHS = ("resnet18", "resnet34", "resnet50", "resnet101")
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class ResNetTrunk(nn.Module):
    """A torchvision ResNet up to global average pooling: inputs in [-1, 1] -> [N, D].

    Inputs are mapped to ImageNet statistics inside the network, so local ImageNet
    weights see what they were trained on and ``bench.nn.images.to_input`` stays the one
    input convention.

    Args:
        arch: One of ``ARCHS``.
        weights: Path of a torchvision state dict (ImageNet), or None for random init.
        last_stride: Stride of the first block of ``layer4`` (1 doubles the final map, as
            in reID practice; 2 is the classification default).

    Raises:
        BenchError: Unknown architecture, missing or mismatched weights file.
    """

    def __init__(self, arch: str, weights: str | None = None, last_stride: int = 2):
        super().__init__()
        if arch not in ARCHS:
            raise BenchError(f"unknown backbone {arch!r} (available: {', '.join(ARCHS)})")
        if last_stride not in (1, 2):
            raise BenchError(f"last_stride must be 1 or 2, got {last_stride!r}")
        import torchvision  # imported when a model is built: it costs a second at start-up

        net = getattr(torchvision.models, arch)(weights=None)
        if weights:
            load_imagenet_weights(net, weights)
        if last_stride == 1:
            block = net.layer4[0]
            conv = block.conv2 if isinstance(block, torchvision.models.resnet.Bottleneck) else block.conv1
            conv.stride = (1, 1)
            block.downsample[0].stride = (1, 1)
        self.dim = net.fc.in_features
        self.body = nn.Sequential(
            net.conv1, net.bn1, net.relu, net.maxpool, net.layer1, net.layer2, net.layer3, net.layer4
        )
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Returns pooled features [N, D] of inputs [N, 3, H, W] in [-1, 1] (grey ones repeated to RGB)."""
        x = ((as_rgb(x) + 1.0) * 0.5 - self.mean) / self.std
        return self.body(x).mean(dim=(2, 3))


def check_weights(path: str | None, owner: str) -> None:
    """Checks, before any work, that a configured weights file exists.

    Raises:
        BenchError: A path is given and no file is there.
    """
    if path and not Path(path).expanduser().is_file():
        raise BenchError(f"{owner}: weights file {path} not found (ImageNet weights are never downloaded)")


def read_state_dict(path: str) -> dict[str, torch.Tensor]:
    """Reads a local state dict (tensors only; ``{"state_dict": ...}`` unwrapped, DDP's ``module.`` prefix removed).

    Raises:
        BenchError: The file is missing or unreadable.
    """
    file = Path(path).expanduser()
    if not file.is_file():
        raise BenchError(f"weights file {file} not found (weights are never downloaded)")
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise BenchError(f"cannot read weights {file}: {type(exc).__name__}: {exc}") from None
    if isinstance(state, dict) and "state_dict" in state:
        state = state["state_dict"]
    return {k.removeprefix("module."): v for k, v in state.items()}


def load_imagenet_weights(net: nn.Module, path: str) -> None:
    """Loads a local torchvision ResNet state dict into ``net``, ignoring the classifier.

    Raises:
        BenchError: The file is missing, unreadable, or does not fit the architecture.
    """
    file = Path(path).expanduser()
    state = {k: v for k, v in read_state_dict(path).items() if not k.startswith("fc.")}
    try:
        missing, unexpected = net.load_state_dict(state, strict=False)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[-1].strip()
        raise BenchError(f"weights {file} do not fit {type(net).__name__}: {first}") from None
    missing = [k for k in missing if not k.startswith("fc.")]
    if missing or unexpected:
        first = (missing or unexpected)[0]
        raise BenchError(f"weights {file} do not fit {type(net).__name__}: e.g. key {first!r} "
                         f"({len(missing)} missing, {len(unexpected)} unexpected)")


class ReidNet(nn.Module):
    """ResNet + BNNeck (Luo et al., "Bag of Tricks"), the model of Centroid-reID.

    In training mode the forward pass returns (pooled features, identity logits): the
    metric losses act on the pooled features, cross-entropy on the logits of the
    batch-normalised features. In eval mode it returns the batch-normalised features,
    the embedding used for retrieval.

    Args:
        arch: Backbone name.
        num_classes: Training identities.
        weights: Local ImageNet weights, or None.
        last_stride: Stride of ``layer4``.
    """

    def __init__(self, arch: str, num_classes: int, weights: str | None = None, last_stride: int = 1):
        super().__init__()
        self.backbone = ResNetTrunk(arch, weights, last_stride)
        self.neck = nn.BatchNorm1d(self.backbone.dim)
        self.neck.bias.requires_grad_(False)
        self.classifier = nn.Linear(self.backbone.dim, num_classes, bias=False)
        nn.init.normal_(self.classifier.weight, std=0.001)

    def forward(self, x: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Returns (features, logits) in training mode, embeddings in eval mode."""
        features = self.backbone(x)
        embedded = self.neck(features)
        if self.training:
            return features, self.classifier(embedded)
        return embedded


class AttributeNet(nn.Module):
    """ResNet backbone + one linear layer: the attribute adversary of the reID paper.

    Args:
        arch: Backbone name.
        num_classes: Values of the attribute.
        weights: Local ImageNet weights, or None.
    """

    def __init__(self, arch: str, num_classes: int, weights: str | None = None):
        super().__init__()
        self.backbone = ResNetTrunk(arch, weights, last_stride=2)
        self.head = nn.Linear(self.backbone.dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Returns attribute logits [N, num_classes]."""
        return self.head(self.backbone(x))
