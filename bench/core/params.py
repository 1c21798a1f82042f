"""Typed, validated parameters: what a mechanism accepts, for the CLI, grids and Optuna."""

from __future__ import annotations

import difflib
import math
import sys
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from bench.errors import BenchError


@dataclass(frozen=True)
class Param:
    """One parameter: its type, default, valid range and tuning range.

    Attributes:
        type: ``int``, ``float`` or ``str``.
        default: Value used when none is given.
        low: Smallest valid value (numbers), or None for unbounded.
        high: Largest valid value (numbers), or None for unbounded.
        low_open: Whether ``low`` itself is excluded (e.g. epsilon > 0).
        log: Whether grids and tuning should space values logarithmically.
        choices: Allowed values (strings).
        nullable: Whether ``none`` is a valid value (e.g. "no noise").
        tune: (low, high) range searched by ``bench tune``; defaults to (low, high).
        help: One line for ``bench list``.
        cost: ``linear`` when the mechanism's run time grows in proportion to the value
            (a training's steps): the plan's time estimate scales with it
            (:mod:`bench.cell.estimate`); None when the value does not change the time much.
        unit: ``px`` for a length in pixels of the image the mechanism runs on (each image
            at the size it has in the data, the same in every profile); ``bench list`` says so.
    """

    type: type
    default: Any
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    log: bool = False
    choices: tuple[str, ...] | None = None
    nullable: bool = False
    tune: tuple[float, float] | None = None
    help: str = ""
    cost: str | None = None
    unit: str | None = None

    def parse(self, name: str, value: Any, owner: str = "") -> Any:
        """Converts and validates a value given as a string or a Python object.

        Args:
            name: The parameter's name, for messages.
            value: The given value.
            owner: Who owns the parameter, for messages (e.g. ``mechanism 'dp_pix'``).

        Returns:
            The value converted to the parameter's type.

        Raises:
            BenchError: The value has the wrong type or is out of range.
        """
        where = f"{owner} parameter {name!r}" if owner else f"parameter {name!r}"
        if value is None or (isinstance(value, str) and value.strip().lower() in {"none", "null"}):
            if self.nullable:
                return None
            raise BenchError(f"{where} cannot be none; expected {self.describe_range()}")
        converted = self._convert(where, value)
        self._check_range(where, converted)
        return converted

    def _convert(self, where: str, value: Any) -> Any:
        if self.type is str:
            text = str(value)
            if self.choices and text not in self.choices:
                hint = _did_you_mean(text, self.choices)
                raise BenchError(f"{where} must be one of {', '.join(self.choices)}, got {text!r}{hint}")
            return text
        if isinstance(value, bool):
            raise BenchError(f"{where} expects a number, got {value!r}")
        try:
            number = float(value) if not isinstance(value, (int, float)) else value
        except (TypeError, ValueError):
            raise BenchError(f"{where} expects {self.type.__name__}, got {value!r}") from None
        if isinstance(number, float) and not math.isfinite(number):
            raise BenchError(f"{where} must be finite, got {value!r}")
        if isinstance(number, float) and number != 0 and abs(number) < sys.float_info.min:
            raise BenchError(f"{where} must be a normal float (|x| >= {sys.float_info.min:g}), got {value!r}")
        if self.type is int:
            if float(number) != int(number):
                raise BenchError(f"{where} expects an integer, got {value!r}")
            return int(number)
        return float(number)

    def _check_range(self, where: str, value: Any) -> None:
        if self.type is str:
            return
        below = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        above = self.high is not None and value > self.high
        if below or above:
            raise BenchError(f"{where} must be {self.describe_range()}, got {value!r}")

    def describe_range(self) -> str:
        """Returns the valid range in words, e.g. ``a float in (0, inf)``."""
        if self.type is str:
            return "one of " + ", ".join(self.choices or ())
        lo = "-inf" if self.low is None else _fmt(self.low)
        hi = "inf" if self.high is None else _fmt(self.high)
        left = "(" if self.low_open or self.low is None else "["
        right = ")" if self.high is None else "]"
        kind = "an integer" if self.type is int else "a float"
        return f"{kind} in {left}{lo}, {hi}{right}" + (" or none" if self.nullable else "")

    def describe(self) -> str:
        """Returns one line: type, range, scale, default and what ``bench tune`` searches."""
        scale = ", log scale" if self.log else ""
        if self.type is str:
            tuned = "; tuned over its choices" if self.choices and len(self.choices) > 1 else ""
        else:
            try:
                low, high = self.tune_range()
                tuned = f"; tuned over [{_fmt(low)}, {_fmt(high)}]" if low != high else "; not tuned"
            except BenchError:
                tuned = "; not tuned"
        return f"{self.describe_range()}{scale}; default {self.default!r}{tuned}"

    def tune_range(self) -> tuple[float, float]:
        """Returns the finite (low, high) range searched when tuning.

        Raises:
            BenchError: The parameter has no finite range to search.
        """
        if self.tune is not None:
            return self.tune
        if self.low is None or self.high is None:
            raise BenchError("parameter has no finite range to tune over; set Param.tune")
        return (self.low, self.high)


class ParamSpace(Mapping[str, Param]):
    """An ordered set of named parameters.

    Args:
        **params: Name to :class:`Param`.
    """

    def __init__(self, **params: Param):
        for name, param in params.items():
            if param.default is not None or not param.nullable:
                param.parse(name, param.default)
        self._params = dict(params)

    def __getitem__(self, name: str) -> Param:
        return self._params[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._params)

    def __len__(self) -> int:
        return len(self._params)

    def __repr__(self) -> str:
        return f"ParamSpace({', '.join(self._params)})"

    def resolve(self, given: Mapping[str, Any], owner: str = "") -> dict[str, Any]:
        """Validates given values and fills in defaults.

        Args:
            given: Parameter values, as strings or Python objects.
            owner: Who owns the space, for messages.

        Returns:
            Every parameter's value, in declaration order.

        Raises:
            BenchError: An unknown name or an invalid value.
        """
        for name in given:
            if name not in self._params:
                known = ", ".join(self._params) or "none"
                prefix = f"{owner} has no parameter" if owner else "no parameter"
                raise BenchError(f"{prefix} {name!r}{_did_you_mean(name, self._params)} (parameters: {known})")
        return {
            name: param.parse(name, given[name], owner) if name in given else param.default
            for name, param in self._params.items()
        }


def parse_assignments(items: list[str] | None, form: str = "NAME=VALUE") -> dict[str, str]:
    """Parses ``["k=v", ...]`` from the command line.

    Args:
        items: The command-line items.
        form: How an item should look, for messages.

    Raises:
        BenchError: An item without ``=`` or a name given twice.
    """
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise BenchError(f"expected {form}, got {item!r}")
        if key in out:
            raise BenchError(f"parameter {key!r} given twice")
        out[key] = value.strip()
    return out


def _did_you_mean(name: str, known) -> str:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _fmt(x: float) -> str:
    return f"{x:g}"
