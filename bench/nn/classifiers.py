"""torchvision classification architectures for uint8-derived inputs, built offline.

A network takes inputs in [-1, 1] (:func:`bench.nn.images.to_input`) and maps them to
ImageNet statistics itself, so local torchvision weights see what they were trained on.
Weights are read from a local file when one is given; they are never downloaded.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch
from torch import nn

from bench.core.config import did_you_mean
from bench.errors import BenchError
from bench.nn.images import as_rgb
from bench.nn.resnet import IMAGENET_MEAN, IMAGENET_STD, read_state_dict

ARCHS = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "alexnet", "vgg11", "vgg13", "vgg16",
         "vgg19", "vgg11_bn", "vgg16_bn", "mobilenet_v2", "mobilenet_v3_small", "mobilenet_v3_large",
         "densenet121", "densenet161", "densenet169", "densenet201", "shufflenet_v2_x1_0", "squeezenet1_1")
"""The architectures of the face-obfuscation paper's Tables 3, 8 and 9, and a few more."""


class Classifier(nn.Module):
    """A torchvision classifier behind the project's input convention.

    Args:
        arch: One of :data:`ARCHS`.
        classes: Output classes.
        weights: A local torchvision state dict; its classifier layer is kept only when its
            shape fits ``classes``.

    Raises:
        BenchError: Unknown architecture, missing or mismatched weights file.
    """

    def __init__(self, arch: str, classes: int, weights: str | None = None):
        super().__init__()
        if arch not in ARCHS:
            raise BenchError(f"unknown architecture {arch!r}{did_you_mean(arch, ARCHS)} (available: {', '.join(ARCHS)})")
        import torchvision

        self.arch = arch
        self.net = getattr(torchvision.models, arch)(weights=None, num_classes=classes)
        if weights:
            load_weights(self.net, weights)
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Returns logits [N, classes] of inputs [N, 3, H, W] in [-1, 1] (grey ones repeated to RGB)."""
        return self.net(((as_rgb(x) + 1.0) * 0.5 - self.mean) / self.std)

    def head(self) -> nn.Linear:
        """Returns the last linear layer (what a last-layer finetuning trains)."""
        return last_linear(self.net)

    def replace_head(self, classes: int) -> None:
        """Replaces the last linear layer by a fresh one with ``classes`` outputs."""
        old = last_linear(self.net)
        new = nn.Linear(old.in_features, classes)
        for module in self.net.modules():
            for name, child in module.named_children():
                if child is old:
                    setattr(module, name, new)
                    return


def last_linear(net: nn.Module) -> nn.Linear:
    """Returns the network's last ``nn.Linear`` in module order (its classifier).

    Raises:
        BenchError: The network has none (squeezenet classifies with a convolution).
    """
    linear = [m for m in net.modules() if isinstance(m, nn.Linear)]
    if not linear:
        raise BenchError(f"{type(net).__name__} has no linear classifier layer to finetune")
    return linear[-1]


def check_input(arch: str, size: int, owner: str) -> None:
    """Checks before any work that ``arch`` accepts square inputs of ``size`` pixels.

    Raises:
        BenchError: The architecture's feature maps vanish at that size.
    """
    problem = _input_problem(arch, size)
    if problem:
        raise BenchError(f"{owner}: {arch} cannot classify {size} x {size} inputs ({problem}); "
                         "set a larger input_size")


@functools.lru_cache(maxsize=None)
def _input_problem(arch: str, size: int) -> str:
    """Runs the architecture once on a blank input (on the meta device: no memory, no arithmetic)."""
    with torch.device("meta"):
        model = Classifier(arch, 2)
    try:
        with torch.no_grad():
            model.eval()(torch.zeros(1, 3, size, size, device="meta"))
    except RuntimeError as exc:
        return str(exc).splitlines()[0][:120]
    return ""


def load_weights(net: nn.Module, path: str) -> None:
    """Loads a local torchvision state dict into ``net``; a classifier of another shape is left fresh.

    Raises:
        BenchError: The file is missing, unreadable, or does not fit the architecture.
    """
    file = Path(path).expanduser()
    state = {k.removeprefix("net."): v for k, v in read_state_dict(path).items()}
    own = net.state_dict()
    last = next(name for name, m in reversed(list(net.named_modules())) if isinstance(m, nn.Linear))
    head = {k for k, v in state.items() if k in own and own[k].shape != v.shape and k.startswith(f"{last}.")}
    state = {k: v for k, v in state.items() if k not in head}
    wrong = [k for k, v in state.items() if k in own and own[k].shape != v.shape]
    missing, unexpected = net.load_state_dict({k: v for k, v in state.items() if k not in wrong}, strict=False)
    missing = [k for k in missing if k not in head and k not in wrong]
    if wrong or missing or unexpected:
        first = (wrong or missing or unexpected)[0]
        raise BenchError(f"weights {file} do not fit {type(net).__name__}: e.g. key {first!r} "
                         f"({len(missing)} missing, {len(unexpected)} unexpected)")
