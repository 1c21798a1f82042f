"""The messages between PrivBench and an isolated mechanism's worker (:mod:`bench.testing.isolated`).

A message is an 8-byte length, a JSON header, then the raw bytes of the tensors it holds, in
order. Values are JSON's (None, bool, int, float with NaN and infinities, str, list) plus
tagged objects: ``{"__tensor__": k}`` (the k-th tensor after the header, its dtype and shape
in the header), ``{"__tuple__": [...]}``, ``{"__dict__": [[key, value], ...]}`` and
``{"__streams__": k, "device": ...}`` (per-image random streams: their seeds are tensor k).
Nothing is pickled: what the worker sends back is read as data, never as code, and floats
travel exactly (JSON writes the shortest text that reads back to the same double), tensors
byte for byte.
"""

from __future__ import annotations

import json
import math
import os
import select
import struct
import time
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["WireError", "decode", "encode", "read_message", "write_message"]

_DTYPES = {name: getattr(torch, name) for name in (
    "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64", "bool")}
_NAMES = {dtype: name for name, dtype in _DTYPES.items()}
MAX_HEADER = 64 << 20
"""Largest JSON header read (a header holds parameters, claims and short texts, never images)."""
MAX_TENSOR_BYTES = 1 << 36
"""Largest tensor read (64 GiB): a bound on what a malformed length could make the reader allocate."""


class WireError(Exception):
    """A message could not be written or read (a value that cannot travel, a malformed or cut message)."""


class Streams:
    """What an encoder sees of random streams: their int64 seeds and the device they draw on."""

    def __init__(self, seeds: torch.Tensor, device: str):
        self.seeds, self.device = seeds, device


def encode(value: Any, tensors: list[torch.Tensor], streams: Callable[[Any], Streams | None] = lambda v: None) -> Any:
    """Returns ``value`` as JSON data, its tensors appended to ``tensors`` (as contiguous CPU copies or views).

    Args:
        value: None, bool, int, float, str, tensors, streams and lists, tuples and dicts of them.
        tensors: Where the tensors go.
        streams: Returns a :class:`Streams` for a value that is random streams, else None.

    Raises:
        WireError: A value of another type.
    """
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value
    if isinstance(value, torch.Tensor):
        tensors.append(value.detach().cpu().contiguous())
        return {"__tensor__": len(tensors) - 1}
    found = streams(value)
    if found is not None:
        tensors.append(found.seeds.detach().cpu().to(torch.int64).contiguous())
        return {"__streams__": len(tensors) - 1, "device": str(found.device)}
    if isinstance(value, list):
        return [encode(v, tensors, streams) for v in value]
    if isinstance(value, tuple):
        return {"__tuple__": [encode(v, tensors, streams) for v in value]}
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                raise WireError(f"a dict key of type {type(key).__name__} cannot travel")
        return {"__dict__": [[k, encode(v, tensors, streams)] for k, v in value.items()]}
    raise WireError(f"a value of type {type(value).__name__} cannot travel between processes")


def decode(data: Any, tensors: list[torch.Tensor], streams: Callable[[torch.Tensor, str], Any] | None = None) -> Any:
    """Returns the value :func:`encode` made ``data`` of (streams rebuilt by ``streams(seeds, device)``).

    Raises:
        WireError: Malformed data (an unknown tag, a tensor index out of range, streams where none are expected).
    """
    if isinstance(data, list):
        return [decode(v, tensors, streams) for v in data]
    if not isinstance(data, dict):
        return data
    if "__tensor__" in data:
        return _tensor_at(tensors, data["__tensor__"])
    if "__tuple__" in data:
        return tuple(decode(v, tensors, streams) for v in data["__tuple__"])
    if "__dict__" in data:
        return {k: decode(v, tensors, streams) for k, v in data["__dict__"]}
    if "__streams__" in data:
        if streams is None:
            raise WireError("random streams where none are expected")
        return streams(_tensor_at(tensors, data["__streams__"]), str(data.get("device", "cpu")))
    raise WireError(f"unknown tagged value {sorted(data)[:3]}")


def _tensor_at(tensors: list[torch.Tensor], index: Any) -> torch.Tensor:
    if not isinstance(index, int) or not 0 <= index < len(tensors):
        raise WireError(f"tensor index {index!r} out of range")
    return tensors[index]


def write_message(fd: int, value: Any, deadline: float | None = None,
                  streams: Callable[[Any], Streams | None] = lambda v: None) -> None:
    """Writes one message to a file descriptor (non-blocking ones wait for room until ``deadline``).

    Raises:
        WireError: The value cannot travel.
        TimeoutError: The reader took none of it in time.
        OSError: The reader is gone (a broken pipe).
    """
    tensors: list[torch.Tensor] = []
    body = encode(value, tensors, streams)
    metas = [{"dtype": _dtype_name(t), "shape": list(t.shape)} for t in tensors]
    header = json.dumps({"value": body, "tensors": metas}, allow_nan=True, separators=(",", ":")).encode()
    _write_all(fd, struct.pack("<Q", len(header)) + header, deadline)
    for t in tensors:
        if t.numel():
            _write_all(fd, memoryview(t.reshape(-1).view(torch.uint8).numpy()), deadline)


def read_message(fd: int, deadline: float | None = None,
                 streams: Callable[[torch.Tensor, str], Any] | None = None) -> Any:
    """Reads one message from a file descriptor, waiting until ``deadline`` (a ``time.monotonic`` value).

    Raises:
        EOFError: The writer closed its end (before or during the message).
        TimeoutError: No whole message came in time.
        WireError: A malformed message.
    """
    (size,) = struct.unpack("<Q", _read_exact(fd, 8, deadline))
    if size > MAX_HEADER:
        raise WireError(f"a message header of {size} bytes")
    try:
        header = json.loads(bytes(_read_exact(fd, size, deadline)))
        metas = header["tensors"]
    except (ValueError, KeyError, TypeError) as exc:
        raise WireError(f"a malformed message header ({exc})") from None
    tensors = []
    for meta in metas:
        dtype = _DTYPES.get(str(meta.get("dtype")))
        shape = meta.get("shape")
        if dtype is None or not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise WireError(f"a malformed tensor description {meta!r}")
        count = math.prod(shape)
        size = count * torch.empty((), dtype=dtype).element_size()
        if size > MAX_TENSOR_BYTES:
            raise WireError(f"a tensor of {size} bytes")
        if count == 0:
            tensors.append(torch.empty(shape, dtype=dtype))
            continue
        raw = _read_exact(fd, size, deadline)
        tensors.append(torch.frombuffer(raw, dtype=torch.uint8).view(dtype).reshape(shape))
    return decode(header.get("value"), tensors, streams)


def _dtype_name(t: torch.Tensor) -> str:
    name = _NAMES.get(t.dtype)
    if name is None:
        raise WireError(f"a tensor of dtype {t.dtype} cannot travel")
    return name


def _remaining(deadline: float | None) -> float | None:
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return left


def _read_exact(fd: int, size: int, deadline: float | None) -> bytearray:
    buffer = bytearray(size)
    view, got = memoryview(buffer), 0
    while got < size:
        if deadline is not None:
            ready, _, _ = select.select([fd], [], [], _remaining(deadline))
            if not ready:
                raise TimeoutError
        n = os.readv(fd, [view[got:]])
        if n == 0:
            raise EOFError
        got += n
    return buffer


def _write_all(fd: int, data: bytes | memoryview, deadline: float | None) -> None:
    view, sent = memoryview(data).cast("B"), 0
    while sent < len(view):
        if deadline is not None:
            _, ready, _ = select.select([], [fd], [], _remaining(deadline))
            if not ready:
                raise TimeoutError
        try:
            sent += os.write(fd, view[sent:])
        except BlockingIOError:
            continue
