"""A reader of dlib's serialised face descriptor network (``dlib_face_recognition_resnet_model_v1.dat``).

dlib writes a network (``dlib/dnn/core.h``) outermost layer first: the loss layer's version
and details, then each ``add_layer``/tag/skip layer's version down to the input layer, the
input layer's details, and then, innermost first, each ``add_layer``'s details followed by
its bookkeeping (three bools and two or three tensors, empty in a saved model). Primitive
encodings (``dlib/serialize.h``):

- integers: a control byte (low 4 bits: byte count; bit 0x80: negative), then the magnitude
  little-endian in that many bytes;
- floats (scalars): an integer mantissa then an integer exponent (value ``m * 2**e``;
  exponents 32000..32002 mean inf, -inf, NaN);
- strings: an integer length then the bytes; bools: ASCII ``'1'`` or ``'0'``;
- tensors (``dlib/cuda/tensor.h``, version 2): four integer dimensions (n, k, nr, nc) then
  the values as little-endian float32 (read in one ``numpy.frombuffer``);
  alias tensors: version 1 and four dimensions, no values.

Layer details start with their version string (``con_4``, ``affine_2``, ``bn_con2``, ...),
which says what the layer is. Only what this network is made of is understood:
``con``, ``bn_con``/``affine``, ``relu``, ``max_pool``, ``avg_pool``, ``add_prev``, ``fc``,
``tag``/``skip`` and the ``loss_metric`` and ``input_rgb_image_sized`` ends. Anything else is
a :class:`DlibFormatError` naming the byte offset.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["DlibFormatError", "Layer", "Network", "read_network"]


class DlibFormatError(ValueError):
    """A file that is not a dlib network of the expected shape (the message says where)."""


@dataclass
class Layer:
    """One computational layer as dlib stored it.

    Attributes:
        kind: ``con``, ``affine``, ``relu``, ``max_pool``, ``avg_pool``, ``add_prev``, ``fc``,
            ``tag`` or ``skip``.
        version: Its serialisation version string (``con_4``, ...; ``""`` for tag and skip).
        tag: The tag id of a ``tag``, ``skip`` or ``add_prev`` layer (0 otherwise).
        meta: Integer settings (filter size, stride, padding, outputs, ...).
        tensors: Its parameters as float32 arrays (``weight``, ``bias``, ``gamma``, ``beta``).
    """

    kind: str
    version: str = ""
    tag: int = 0
    meta: dict[str, int] = field(default_factory=dict)
    tensors: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class Network:
    """A dlib network read from its file.

    Attributes:
        loss: The loss layer's version string and settings.
        input_means: The per-channel means (red, green, blue) the input layer subtracts.
        input_size: The (rows, columns) an ``input_rgb_image_sized`` layer expects.
        layers: The layers innermost (next to the input) first.
    """

    loss: dict[str, object]
    input_means: tuple[float, float, float]
    input_size: tuple[int, int]
    layers: list[Layer]


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = memoryview(data), 0

    def fail(self, what: str) -> DlibFormatError:
        return DlibFormatError(f"dlib network: {what} at byte {self.pos}")

    def int(self) -> int:
        if self.pos >= len(self.data):
            raise self.fail("unexpected end of file")
        control = self.data[self.pos]
        size, negative = control & 0x0F, bool(control & 0x80)
        if size == 0 or size > 8 or control & 0x70 or self.pos + 1 + size > len(self.data):
            raise self.fail(f"bad integer control byte {control:#04x}")
        value = int.from_bytes(self.data[self.pos + 1 : self.pos + 1 + size], "little")
        self.pos += 1 + size
        return -value if negative else value

    def float(self) -> float:
        mantissa, exponent = self.int(), self.int()
        if exponent >= 32000:
            return {32000: math.inf, 32001: -math.inf}.get(exponent, math.nan)
        return math.ldexp(mantissa, exponent)

    def string(self) -> str:
        size = self.int()
        if size < 0 or self.pos + size > len(self.data):
            raise self.fail(f"bad string length {size}")
        text = bytes(self.data[self.pos : self.pos + size])
        self.pos += size
        try:
            return text.decode("ascii")
        except UnicodeDecodeError:
            raise self.fail("a version string that is not ASCII") from None

    def bool(self) -> bool:
        if self.pos >= len(self.data) or self.data[self.pos] not in (ord("0"), ord("1")):
            raise self.fail("bad bool")
        self.pos += 1
        return self.data[self.pos - 1] == ord("1")

    def tensor(self) -> np.ndarray:
        version = self.int()
        if version != 2:
            raise self.fail(f"tensor version {version} (expected 2)")
        shape = tuple(self.int() for _ in range(4))
        count = math.prod(shape)
        if min(shape) < 0 or self.pos + 4 * count > len(self.data):
            raise self.fail(f"bad tensor shape {shape}")
        values = np.frombuffer(self.data, dtype="<f4", count=count, offset=self.pos).astype(np.float32)
        self.pos += 4 * count
        return values.reshape(shape)

    def alias(self) -> tuple[int, int, int, int]:
        version = self.int()
        if version != 1:
            raise self.fail(f"alias tensor version {version} (expected 1)")
        return tuple(self.int() for _ in range(4))  # type: ignore[return-value]

    def version(self, allowed: range | tuple[int, ...], what: str) -> int:
        version = self.int()
        if version not in allowed:
            raise self.fail(f"{what} version {version}")
        return version


def read_network(path: str | Path, structure: list[str]) -> Network:
    """Reads a dlib network file whose layers, outermost first, are ``structure``.

    Args:
        path: The ``.dat`` file.
        structure: One entry per layer between the loss and the input layers, outermost
            first: ``"layer"`` (an ``add_layer``), ``"tag<N>"`` or ``"skip<N>"``.

    Raises:
        DlibFormatError: The file does not hold such a network (or is truncated, or has
            bytes left over).
    """
    r = _Reader(Path(path).read_bytes())
    r.version((1,), "add_loss_layer")
    loss_version = r.string()
    loss: dict[str, object] = {"version": loss_version}
    if loss_version == "loss_metric_2":
        loss["margin"], loss["distance_threshold"] = r.float(), r.float()
    elif loss_version != "loss_metric_":
        raise r.fail(f"unexpected loss layer {loss_version!r}")
    headers = []
    for depth, entry in enumerate(structure):
        if entry == "layer":  # the innermost one (holding the input layer) has its own numbering, 2 or 3
            headers.append(r.version((2, 3) if depth == len(structure) - 1 else (1, 2), "add_layer"))
        elif entry.startswith(("tag", "skip")):
            r.version((1,), entry)
            headers.append(0)
        else:
            raise ValueError(f"unknown structure entry {entry!r}")
    if structure[-1] != "layer":
        raise ValueError("the innermost layer must be an add_layer")
    means, size = _input_layer(r)
    layers: list[Layer] = []
    for depth in range(len(structure) - 1, -1, -1):
        entry = structure[depth]
        if entry != "layer":
            kind = "tag" if entry.startswith("tag") else "skip"
            layers.append(Layer(kind, tag=int(entry[len(kind):])))
            continue
        layers.append(_details(r))
        for _ in range(3):  # this_layer_setup_called, gradient_input_is_stale, get_output_and_gradient_input_disabled
            r.bool()
        r.tensor(), r.tensor()  # x_grad, cached_output
        innermost = depth == len(structure) - 1
        if innermost:
            r.tensor()  # grad_final
            if headers[depth] == 3:
                r.int()  # _sample_expansion_factor
        elif headers[depth] == 2:
            r.tensor()  # params_grad
    if r.pos != len(r.data):
        raise r.fail(f"{len(r.data) - r.pos} bytes left over")
    return Network(loss, means, size, layers)


def _input_layer(r: _Reader) -> tuple[tuple[float, float, float], tuple[int, int]]:
    version = r.string()
    if version != "input_rgb_image_sized":
        raise r.fail(f"unexpected input layer {version!r}")
    means = (r.float(), r.float(), r.float())
    return means, (r.int(), r.int())


def _details(r: _Reader) -> Layer:
    at = r.pos
    version = r.string()
    if version in ("con_4", "con_5", "con_6"):
        params = r.tensor().reshape(-1)
        filters = r.int()
        nr, nc, sy, sx, py, px = (r.int() for _ in range(6))
        w_shape, b_shape = r.alias(), r.alias()
        for _ in range(4):  # learning rate and weight decay multipliers
            r.float()
        use_bias = r.bool() if version in ("con_5", "con_6") else True
        if version == "con_6":
            r.bool()  # use_relu (a fused relu only cuDNN uses)
        n_w = math.prod(w_shape)
        bias = params[n_w : n_w + math.prod(b_shape)] if use_bias and math.prod(b_shape) else np.zeros(filters, np.float32)
        if w_shape[0] != filters or (w_shape[2], w_shape[3]) != (nr, nc) or len(params) < n_w + (len(bias) if use_bias else 0):
            raise DlibFormatError(f"dlib network: con layer at byte {at} has inconsistent shapes")
        meta = {"filters": filters, "nr": nr, "nc": nc, "stride_y": sy, "stride_x": sx, "padding_y": py, "padding_x": px}
        return Layer("con", version, meta=meta,
                     tensors={"weight": params[:n_w].reshape(w_shape).copy(), "bias": bias.copy()})
    if version in ("affine_", "affine_2"):
        params = r.tensor().reshape(-1)
        g_shape, b_shape = r.alias(), r.alias()
        mode = r.int()
        disabled = r.bool() if version == "affine_2" else False
        n_g = math.prod(g_shape)
        if disabled:
            raise DlibFormatError(f"dlib network: a disabled affine layer at byte {at} is not supported")
        return Layer("affine", version, meta={"mode": mode},
                     tensors={"gamma": params[:n_g].copy(), "beta": params[n_g : n_g + math.prod(b_shape)].copy()})
    if version == "bn_con2":  # dlib converts a batch norm into an affine layer as it reads it
        params = r.tensor().reshape(-1)
        g_shape, b_shape = r.alias(), r.alias()
        r.tensor(), r.tensor()  # means, invstds (of the last training batch)
        running_means, running_variances = r.tensor().reshape(-1), r.tensor().reshape(-1)
        r.int(), r.int()  # num_updates, running_stats_window_size
        for _ in range(4):
            r.float()
        eps = r.float()
        n_g = math.prod(g_shape)
        gamma = params[:n_g] / np.sqrt(running_variances + np.float32(eps))
        beta = params[n_g : n_g + math.prod(b_shape)] - gamma * running_means
        return Layer("affine", version, meta={"mode": 0},  # CONV_MODE
                     tensors={"gamma": gamma.astype(np.float32), "beta": beta.astype(np.float32)})
    if version in ("relu_", "relu_2"):
        if version == "relu_2" and r.bool():
            raise DlibFormatError(f"dlib network: a disabled relu layer at byte {at} is not supported")
        return Layer("relu", version)
    if version in ("max_pool_2", "avg_pool_2"):
        nr, nc, sy, sx, py, px = (r.int() for _ in range(6))
        meta = {"nr": nr, "nc": nc, "stride_y": sy, "stride_x": sx, "padding_y": py, "padding_x": px}
        return Layer(version[:-2], version, meta=meta)
    if version == "add_prev_":
        return Layer("add_prev", version)
    if version in ("fc_2", "fc_3"):
        outputs, inputs = r.int(), r.int()
        params = r.tensor().reshape(-1)
        w_shape, b_shape = r.alias(), r.alias()
        bias_mode = r.int()
        for _ in range(4):
            r.float()
        use_bias = r.bool() if version == "fc_3" else True
        n_w = math.prod(w_shape)
        tensors = {"weight": params[:n_w].reshape(inputs, outputs).T.copy()}  # dlib: output = input x weights
        if bias_mode == 0 and use_bias:  # FC_HAS_BIAS
            tensors["bias"] = params[n_w : n_w + math.prod(b_shape)].copy()
        return Layer("fc", version, meta={"outputs": outputs, "inputs": inputs, "bias_mode": bias_mode}, tensors=tensors)
    raise DlibFormatError(f"dlib network: unexpected layer {version!r} at byte {at}")
