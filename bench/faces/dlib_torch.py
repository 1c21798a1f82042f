"""dlib's face descriptor ResNet (``dlib_face_recognition_resnet_model_v1.dat``) as a torch module.

dlib-bin's wheel is built without BLAS and runs this network at a few images per second,
holding the GIL, never on a GPU. The same network in torch runs batched on the CPU (oneDNN)
or a GPU and gives dlib's descriptors (cosine >= 0.9999; ``benchmarks/dlib_recognizer.py``).

The network, as dlib's ``examples/dnn_face_recognition_ex.cpp`` and the Python binding
(``tools/python/src/face_recognition.cpp``) define it::

    input_rgb_image_sized<150>: (pixel - channel mean) / 256, means (122.782, 117.001, 104.298)
    con<32,7,7,2,2> affine relu max_pool<3,3,2,2>              150 -> 72 -> 35
    3 x ares<32>, ares_down<64>, 3 x ares<64>, ares_down<128>, 2 x ares<128>,
    ares_down<256>, 2 x ares<256>, ares_down<256>              35 -> 17 -> 8 -> 4 -> 2
    avg_pool_everything fc_no_bias<128>

    ares<N>      = relu(x + affine(con3x3(relu(affine(con3x3(x))))))
    ares_down<N> = relu(avg_pool<2,2,2,2>(x) (+) affine(con3x3(relu(affine(con3x3 stride 2(x))))))

dlib's defaults: a convolution or pooling with stride 1 pads by half its window, one with
stride 2 not at all (read from the file, not assumed). ``(+)`` is dlib's ``add_prev`` of
tensors of different shapes: the sum has the larger size in every dimension and each
operand is zero outside its own extent (at the end of the channels and at the bottom and
right). It matters twice: the skip path of every ``ares_down`` has fewer channels, and at 8 px
the strided convolution gives 3 x 3 while the pooled skip path gives 4 x 4 (then 1 x 1 vs 2 x 2).

Each ``affine`` (a frozen batch norm) is folded into the convolution before it.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bench.faces.dlib_serial import Layer, Network, read_network

STAGES: tuple[tuple[int, int, bool], ...] = (
    (32, 3, False), (64, 1, True), (64, 3, False), (128, 1, True), (128, 2, False),
    (256, 1, True), (256, 2, False), (256, 1, True))
"""(channels, blocks, downsampling) from the input up: alevel4, alevel3, alevel2, alevel1, alevel0."""
FORMAT = 1
"""Bumped when the converted tensors (their names or folding) change."""
CPU_CHUNK = 32
"""Chips per forward pass on the CPU, whatever the batch: larger ones leave the caches (128 runs some 20% slower)."""


def blocks() -> list[tuple[int, bool]]:
    """Returns the residual blocks, innermost first, as (channels, downsampling)."""
    return [(ch, down) for ch, count, down in STAGES for _ in range(count)]


def structure() -> list[str]:
    """Returns the layers between dlib's loss and input layers, outermost first, as :func:`read_network` takes them."""
    inner: list[str] = ["layer"] * 4  # max_pool, relu, affine, con (outermost first)
    for _, down in blocks():
        body = ["layer"] * 5 + ["tag1"]  # affine con relu affine con tag1
        if down:
            inner = ["layer", "layer", "layer", "skip1", "tag2"] + body + inner  # relu add_prev2 avg_pool skip1 tag2
        else:
            inner = ["layer", "layer"] + body + inner  # relu add_prev1
    return ["layer", "layer"] + inner  # fc_no_bias, avg_pool_everything


class Block(nn.Module):
    """One ``ares``/``ares_down`` block (affine layers folded into the convolutions)."""

    def __init__(self, c_in: int, c_out: int, down: bool):
        super().__init__()
        self.down = down
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=2 if down else 1, padding=0 if down else 1)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv2(F.relu_(self.conv1(x)))
        if not self.down:
            return F.relu_(y.add_(x))
        return F.relu_(add_prev(y, F.avg_pool2d(x, 2, 2)))


def add_prev(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """dlib's ``add_prev``: the sum of two [N, C, H, W] tensors, each zero outside its extent."""
    if a.shape == b.shape:
        return a + b
    size = [max(p, q) for p, q in zip(a.shape[1:], b.shape[1:])]

    def grow(t: torch.Tensor) -> torch.Tensor:
        c, h, w = t.shape[1:]
        return F.pad(t, (0, size[2] - w, 0, size[1] - h, 0, size[0] - c))

    return grow(a) + grow(b)


class DlibFaceNet(nn.Module):
    """dlib's 29-layer face descriptor ResNet: uint8 RGB chips [N, 3, 150, 150] -> 128-d descriptors (not normalised)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("means", torch.tensor([122.782, 117.001, 104.298]).view(1, 3, 1, 1))
        self.stem = nn.Conv2d(3, 32, 7, stride=2)
        layers, c_in = [], 32
        for ch, down in blocks():
            layers.append(Block(c_in, ch, down))
            c_in = ch
        self.blocks = nn.Sequential(*layers)
        self.fc = nn.Linear(256, 128, bias=False)

    def forward(self, chips: torch.Tensor) -> torch.Tensor:
        x = ((chips.float() - self.means) / 256.0).contiguous(memory_format=torch.channels_last)
        x = F.max_pool2d(F.relu_(self.stem(x)), 3, 2)
        x = self.blocks(x)
        return self.fc(x.mean((2, 3)))


def state_dict_of(net: Network) -> dict[str, torch.Tensor]:
    """Returns :class:`DlibFaceNet`'s state dict from a parsed network, each affine folded into its convolution.

    Raises:
        ValueError: The layers are not this network's (kind, shape, stride or padding).
    """
    layers = [layer for layer in net.layers if layer.kind not in ("tag", "skip")]
    out: dict[str, torch.Tensor] = {"means": torch.tensor(net.input_means, dtype=torch.float32).view(1, 3, 1, 1)}
    it = iter(layers)

    def take(kind: str, **meta: int) -> Layer:
        layer = next(it, None)
        if layer is None or layer.kind != kind or any(layer.meta.get(k) != v for k, v in meta.items()):
            got = "nothing" if layer is None else f"{layer.kind} {layer.meta}"
            raise ValueError(f"dlib network: expected {kind} {meta}, found {got}")
        return layer

    def conv(prefix: str, c_in: int, c_out: int, size: int, stride: int, padding: int) -> None:
        c = take("con", filters=c_out, nr=size, nc=size, stride_y=stride, stride_x=stride, padding_y=padding,
                 padding_x=padding)
        a = take("affine", mode=0)
        weight, bias, gamma, beta = c.tensors["weight"], c.tensors["bias"], a.tensors["gamma"], a.tensors["beta"]
        if weight.shape != (c_out, c_in, size, size) or gamma.shape != (c_out,) or beta.shape != (c_out,):
            raise ValueError(f"dlib network: {prefix} has shapes {weight.shape}, {gamma.shape}")
        g = gamma.astype(np.float64)
        out[f"{prefix}.weight"] = torch.from_numpy((weight * g[:, None, None, None]).astype(np.float32))
        out[f"{prefix}.bias"] = torch.from_numpy((bias * g + beta).astype(np.float32))

    conv("stem", 3, 32, 7, 2, 0)
    take("relu")
    take("max_pool", nr=3, nc=3, stride_y=2, stride_x=2, padding_y=0, padding_x=0)
    c_in = 32
    for i, (ch, down) in enumerate(blocks()):
        conv(f"blocks.{i}.conv1", c_in, ch, 3, 2 if down else 1, 0 if down else 1)
        take("relu")
        conv(f"blocks.{i}.conv2", ch, ch, 3, 1, 1)
        if down:
            take("avg_pool", nr=2, nc=2, stride_y=2, stride_x=2, padding_y=0, padding_x=0)
        take("add_prev")
        take("relu")
        c_in = ch
    take("avg_pool", nr=0, nc=0, stride_y=1, stride_x=1, padding_y=0, padding_x=0)
    fc = take("fc", outputs=128, inputs=256, bias_mode=1)
    out["fc.weight"] = torch.from_numpy(fc.tensors["weight"])
    if next(it, None) is not None:
        raise ValueError("dlib network: more layers than expected")
    return out


def sha256(path: str | Path) -> str:
    """Returns the full SHA-256 hex digest of a file."""
    h = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def convert(path: str | Path) -> dict[str, torch.Tensor]:
    """Reads a ``.dat`` file into :class:`DlibFaceNet`'s state dict (about a second)."""
    return state_dict_of(read_network(path, structure()))


def converted(path: str | Path, cache_dir: str | Path | None = None) -> tuple[dict[str, torch.Tensor], str]:
    """Returns the state dict of a ``.dat`` file and the file's SHA-256, read once per process.

    Args:
        path: dlib's descriptor file.
        cache_dir: A cache directory (:mod:`bench.storage.cache`): the converted tensors are
            kept there as ``weights/dlib/<key>``, keyed by the file's SHA-256, and verified on
            every read. None: converted in memory only.
    """
    digest = sha256(path)
    return _converted(str(path), digest, str(cache_dir) if cache_dir is not None else None), digest


@lru_cache(maxsize=2)
def _converted(path: str, digest: str, cache_dir: str | None) -> dict[str, torch.Tensor]:
    if cache_dir is None:
        return convert(path)
    from bench.core.keys import content_key
    from bench.storage.cache import Cache

    key = content_key("dlib-face-descriptor", FORMAT, digest)
    state, _ = Cache(cache_dir).get_or_build("weights/dlib", key, lambda: convert(path),
                                             describe=f"{Path(path).name} sha256 {digest[:16]} as torch tensors")
    return state


def load(path: str | Path, device: str | torch.device = "cpu", cache_dir: str | Path | None = None) -> DlibFaceNet:
    """Returns the network of a ``.dat`` file in eval mode on ``device``, its weights channels-last."""
    state, _ = converted(path, cache_dir)
    model = DlibFaceNet()
    model.load_state_dict(state)
    return model.eval().to(device, memory_format=torch.channels_last)


@torch.inference_mode()
def describe(model: DlibFaceNet, chips: np.ndarray | torch.Tensor, batch_size: int = 32) -> np.ndarray:
    """Returns the descriptors [N, 128] (float32, not normalised) of uint8 RGB chips [N, 150, 150, 3].

    Chips are sent to the model's device a batch at a time (on the CPU at most
    :data:`CPU_CHUNK`); the HWC array is already the channels-last layout oneDNN and cuDNN
    run fastest in.
    """
    chips = torch.as_tensor(chips)
    if chips.dtype != torch.uint8 or chips.dim() != 4 or chips.shape[3] != 3:
        raise ValueError(f"describe expects uint8 chips [N, H, W, 3], got {chips.dtype} {tuple(chips.shape)}")
    device = next(model.parameters()).device
    step = max(1, int(batch_size)) if device.type != "cpu" else max(1, min(int(batch_size), CPU_CHUNK))
    parts = []
    for start in range(0, len(chips), step):
        batch = chips[start : start + step].to(device, non_blocking=True).permute(0, 3, 1, 2)
        parts.append(model(batch).float().cpu())
    return torch.cat(parts).numpy() if parts else np.zeros((0, 128), np.float32)
