"""Conversion of setting values to their config field's annotation (used by :func:`bench.core.config.build_config`)."""

from __future__ import annotations

import dataclasses
import math
import re
import sys
import types
import typing
from collections import abc
from typing import Any, Mapping

from bench.errors import BenchError

NONE_WORDS = frozenset({"none", "null"})
_SCALARS = (bool, int, float, str)


def field_types(cls: type) -> dict[str, Any]:
    """Returns field name -> its annotation, resolved (``from __future__ import annotations``)."""
    try:
        return typing.get_type_hints(cls)
    except Exception:  # an annotation that cannot be resolved is taken as Any
        namespace = vars(sys.modules.get(cls.__module__, typing))
        out = {}
        for f in dataclasses.fields(cls):
            try:
                out[f.name] = eval(f.type, dict(namespace)) if isinstance(f.type, str) else f.type  # noqa: S307
            except Exception:
                out[f.name] = Any
        return out


def field_default(f: dataclasses.Field) -> Any:
    """Returns a dataclass field's default (a fresh one from its factory), or None when it has none."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _union_args(tp: Any) -> tuple[Any, ...] | None:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return typing.get_args(tp)
    return None


def is_optional(tp: Any) -> bool:
    """Whether an annotation admits None (``X | None``)."""
    args = _union_args(tp)
    return args is not None and type(None) in args


def _strip_optional(tp: Any) -> Any:
    """Returns ``X`` for ``X | None`` (other unions unchanged)."""
    args = _union_args(tp)
    if args is None:
        return tp
    rest = [a for a in args if a is not type(None)]
    return rest[0] if len(rest) == 1 else tp


def dataclass_type(tp: Any) -> type | None:
    """Returns the dataclass an annotation names (``Sub`` or ``Sub | None``), else None."""
    tp = _strip_optional(tp)
    return tp if isinstance(tp, type) and dataclasses.is_dataclass(tp) else None


def is_mapping(tp: Any) -> bool:
    """Whether an annotation is a mapping (``dict``, ``dict[str, Any]``, ``Mapping``; optional or not)."""
    tp = _strip_optional(tp)
    return tp in (dict, Mapping) or typing.get_origin(tp) in (dict, Mapping, abc.Mapping)


def _is_tuple(tp: Any) -> bool:
    return tp is tuple or typing.get_origin(tp) is tuple


def coerce(value: Any, annotation: Any, where: str, default: Any) -> Any:
    """Converts one setting's value to its field's annotation (see :func:`bench.core.config.build_config`).

    Args:
        value: As given (a string from the command line, or a YAML value).
        annotation: The field's resolved annotation.
        where: The setting, for messages (``task 'x' setting 'lr'``).
        default: The field's default; a bare ``tuple`` field types its elements like it.

    Raises:
        BenchError: The value cannot be read as the annotation says.
    """
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lower() in NONE_WORDS and is_optional(annotation):
        return None
    tp = _strip_optional(annotation)
    if is_mapping(tp):
        if not isinstance(value, Mapping):
            name = where.split()[-1].strip("'")
            raise BenchError(f"{where} is a mapping, got {value!r}; set its entries as {name}.KEY=VALUE")
        return dict(value)
    if _is_tuple(tp):
        return _tuple(value, tp, where, default)
    if tp in _SCALARS:
        return _scalar(value, tp, where)
    return value


def _tuple(value: Any, tp: Any, where: str, default: Any) -> tuple:
    """Reads a tuple from a list, a tuple, one value or a string (``"128,64"``, ``"128x64"``, ``"[40, 70]"``)."""
    from_text = isinstance(value, str)
    if from_text:
        text = value.strip().strip("[]()").strip()
        items: list[Any] = [part.strip() for part in text.split(",")] if text else []
        if len(items) == 1 and re.fullmatch(r"\d+(\s*x\s*\d+)+", items[0]):
            items = [part.strip() for part in items[0].split("x")]
        if any(item == "" for item in items):
            raise BenchError(f"{where} has an empty element in {value!r}")
    elif isinstance(value, (list, tuple)):
        items = list(value)
    elif isinstance(value, Mapping):
        raise BenchError(f"{where} expects a list of values, got {value!r}")
    else:
        items = [value]
    args = typing.get_args(tp)
    if args and args[-1] is not Ellipsis and len(args) != len(items):
        raise BenchError(f"{where} expects {len(args)} values, got {len(items)} in {value!r}")
    kinds = _element_types(args, default, len(items))
    out = []
    for item, kind in zip(items, kinds):
        if kind is None:
            out.append(_guess(item) if from_text else item)
        else:
            out.append(_scalar(item, kind, where))
    return tuple(out)


def _element_types(args: tuple[Any, ...], default: Any, n: int) -> list[Any]:
    """Returns each element's type: from ``tuple[X, ...]`` / ``tuple[X, Y]``, else from the default's elements."""
    if args:
        if args[-1] is Ellipsis:
            return [args[0]] * n
        return list(args)
    if isinstance(default, tuple) and default:
        first = type(default[0])
        if first in _SCALARS and all(type(v) is first for v in default):
            return [first] * n
    return [None] * n


def _guess(text: str) -> Any:
    """Reads an untyped element of a tuple given as text: int, else float, else the text."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _scalar(value: Any, kind: type, where: str) -> Any:
    """Converts a value to int, float, bool or str (strings are parsed; numbers checked)."""
    name = kind.__name__
    if isinstance(value, (list, tuple, Mapping)):
        raise BenchError(f"{where} expects {name}, got {value!r}")
    if not isinstance(value, str):
        if isinstance(value, bool) and kind is not bool:
            raise BenchError(f"{where} expects {name}, got {value!r}")
        if kind is int and isinstance(value, float):
            if not value.is_integer():
                raise BenchError(f"{where} expects an integer, got {value!r}")
            return int(value)
        if kind is float and isinstance(value, (int, float)):
            if not math.isfinite(value):
                raise BenchError(f"{where} must be finite, got {value!r}")
            return float(value)
        return value
    try:
        if kind is int:
            return int(value)
        if kind is float:
            number = float(value)
            if not math.isfinite(number):
                raise BenchError(f"{where} must be finite, got {value!r}")
            return number
        if kind is bool:
            if value.lower() not in {"true", "false", "1", "0"}:
                raise ValueError(value)
            return value.lower() in {"true", "1"}
    except ValueError:
        raise BenchError(f"{where} expects {name}, got {value!r}") from None
    return value
