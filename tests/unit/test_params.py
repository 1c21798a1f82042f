"""Parameter parsing and validation."""

from __future__ import annotations

import pytest

from bench.core.params import Param, ParamSpace, parse_assignments
from bench.errors import BenchError

SPACE = ParamSpace(
    epsilon=Param(float, 3.0, low=0, low_open=True, log=True),
    block=Param(int, 4, low=1, high=64),
    colour=Param(str, "mean", choices=("mean", "red")),
    budget=Param(float, None, low=0, low_open=True, nullable=True),
)


def test_defaults_and_conversion():
    assert SPACE.resolve({"epsilon": "0.5", "block": "8"}) == {"epsilon": 0.5, "block": 8, "colour": "mean", "budget": None}


@pytest.mark.parametrize(
    "given, message",
    [
        ({"epsilon": "-1"}, "epsilon"),
        ({"epsilon": "0"}, r"\(0, inf\)"),
        ({"block": "0"}, "block"),
        ({"block": "2.5"}, "integer"),
        ({"block": "abc"}, "expects int"),
        ({"epsilon": "nan"}, "finite"),
        ({"colour": "meen"}, "did you mean .mean."),
        ({"epsilno": "1"}, "did you mean 'epsilon'"),
        ({"block": "none"}, "cannot be none"),
    ],
)
def test_invalid_values_raise_bench_error(given, message):
    with pytest.raises(BenchError, match=message):
        SPACE.resolve(given, owner="mechanism 'x'")


def test_nullable_accepts_none():
    assert SPACE.resolve({"budget": "none"})["budget"] is None


def test_parse_assignments():
    assert parse_assignments(["a=1", "b = x"]) == {"a": "1", "b": "x"}
    with pytest.raises(BenchError):
        parse_assignments(["novalue"])
    with pytest.raises(BenchError, match="twice"):
        parse_assignments(["a=1", "a=2"])


def test_invalid_default_is_a_programming_error():
    with pytest.raises(BenchError):
        ParamSpace(block=Param(int, 0, low=1))
