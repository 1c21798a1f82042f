"""The messages between PrivBench and an isolated mechanism's worker (bench/testing/_wire.py): exact, never pickled."""

from __future__ import annotations

import math
import os
import struct
import threading
import time

import pytest
import torch

from bench.testing import _wire


def _round_trip(value, streams=None):
    read, write = os.pipe()
    try:
        got: list = []
        reader = threading.Thread(target=lambda: got.append(_wire.read_message(read, time.monotonic() + 30,
                                                                               streams=streams)))
        reader.start()
        _wire.write_message(write, value, streams=lambda v: _wire.Streams(v[1], "cpu") if isinstance(v, tuple)
                            and len(v) == 2 and v[0] == "streams" else None)
        reader.join(30)
        return got[0]
    finally:
        os.close(read)
        os.close(write)


def test_values_and_tensors_of_every_dtype_travel_exactly():
    tensors = {name: torch.arange(-3, 9).to(getattr(torch, name)).reshape(3, 4) for name in
               ("uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64", "bool")}
    value = {"floats": [0.1, 1e-300, -0.0, math.inf, 2 ** 53 + 1.0], "ints": [2 ** 70, -1], "text": "é\n",
             "none": None, "flag": True, "tuple": (1, "a", (2.5,)), "tensors": tensors,
             "empty": torch.empty(0, 3, dtype=torch.uint8), "scalar": torch.tensor(7.25), 3: "int key"}
    got = _round_trip(value)
    assert got["floats"] == value["floats"] and math.copysign(1, got["floats"][2]) == -1
    assert got["ints"] == value["ints"] and got["text"] == "é\n" and got["none"] is None and got["flag"] is True
    assert got["tuple"] == (1, "a", (2.5,)) and got[3] == "int key"
    for name, tensor in tensors.items():
        assert got["tensors"][name].dtype == tensor.dtype and torch.equal(got["tensors"][name], tensor)
    assert got["empty"].shape == (0, 3) and float(got["scalar"]) == 7.25
    assert math.isnan(_round_trip([math.nan])[0])


def test_random_streams_travel_as_their_seeds():
    seeds = torch.tensor([1, 2, 2 ** 62], dtype=torch.int64)
    got = _round_trip({"g": ("streams", seeds)}, streams=lambda s, device: ("rebuilt", s, device))
    assert got["g"][0] == "rebuilt" and torch.equal(got["g"][1], seeds) and got["g"][2] == "cpu"


def test_what_cannot_travel_is_refused_before_anything_is_written():
    read, write = os.pipe()
    try:
        with pytest.raises(_wire.WireError, match="type object cannot travel"):
            _wire.write_message(write, {"x": object()})
        os.set_blocking(read, False)
        with pytest.raises(BlockingIOError):
            os.read(read, 1)  # nothing was sent
    finally:
        os.close(read)
        os.close(write)


def test_a_malformed_cut_or_late_message_is_an_error_not_a_hang():
    read, write = os.pipe()
    try:
        os.write(write, struct.pack("<Q", 5) + b"{oops")
        with pytest.raises(_wire.WireError, match="malformed message header"):
            _wire.read_message(read, time.monotonic() + 5)
        os.write(write, struct.pack("<Q", 1 << 40))
        with pytest.raises(_wire.WireError, match="header of"):
            _wire.read_message(read, time.monotonic() + 5)
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            _wire.read_message(read, time.monotonic() + 0.2)
        assert time.monotonic() - started < 5
        os.write(write, struct.pack("<Q", 100) + b'{"value"')
        os.close(write)
        write = -1
        with pytest.raises(EOFError):
            _wire.read_message(read, time.monotonic() + 5)
    finally:
        os.close(read)
        if write >= 0:
            os.close(write)
