"""Profiles: YAML presets (smoke / quick / paper) resolved into typed config objects."""

from __future__ import annotations

import dataclasses
import difflib
import math
from dataclasses import dataclass
from pathlib import Path
from importlib import resources
from typing import Any, Mapping, TypeVar

import yaml

from bench.errors import BenchError

PROFILES = ("smoke", "quick", "paper")
C = TypeVar("C")


def load_preset(package: str, name: str, profile: str) -> dict[str, Any]:
    """Returns a preset's ``defaults`` merged with one profile's section.

    Args:
        package: Package holding ``presets/<name>.yaml`` (e.g. ``"tasks"``).
        name: The preset file's stem (usually the task or attack name).
        profile: Section to merge over the defaults.

    Raises:
        BenchError: The profile is not in the preset.
    """
    path = resources.files(package) / "presets" / f"{name}.yaml"
    if not path.is_file():
        raise BenchError(f"{package} {name!r} has no preset file {package}/presets/{name}.yaml")
    data = yaml.safe_load(path.read_text()) or {}
    if profile not in data:
        known = ", ".join(k for k in data if k != "defaults")
        raise BenchError(f"{package} preset {name!r} has no profile {profile!r} (profiles: {known})")
    return deep_merge(data.get("defaults") or {}, data[profile] or {})


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Returns ``base`` updated by ``override``, merging nested mappings key by key."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


@dataclass(frozen=True)
class Check:
    """The valid values of one task or attack setting (declared with :func:`setting`).

    Attributes:
        low: Smallest valid number, or None.
        high: Largest valid number, or None.
        low_open: Whether ``low`` itself is excluded (e.g. a learning rate > 0).
        choices: Allowed values, or None.
        path: The value names a local file that must exist (weights).
    """

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    choices: tuple[Any, ...] | None = None
    path: bool = False

    def validate(self, value: Any, where: str) -> None:
        """Raises BenchError when ``value`` (not None) is out of range."""
        if self.choices is not None and value not in self.choices:
            shown = ", ".join(map(str, self.choices))
            raise BenchError(f"{where} must be one of {shown}, got {value!r}")
        if self.path:
            if not Path(str(value)).expanduser().is_file():
                raise BenchError(f"{where}: no such file {value!r} (weights are read locally, never downloaded)")
            return
        if self.low is None and self.high is None:
            return
        values = value if isinstance(value, tuple) else (value,)
        for v in values:
            below = self.low is not None and (v <= self.low if self.low_open else v < self.low)
            above = self.high is not None and v > self.high
            if below or above:
                raise BenchError(f"{where} must be {self.describe()}, got {value!r}")

    def describe(self) -> str:
        """Returns the range in words, e.g. ``in (0, inf)``."""
        lo = "-inf" if self.low is None else f"{self.low:g}"
        hi = "inf" if self.high is None else f"{self.high:g}"
        return f"in {'(' if self.low_open or self.low is None else '['}{lo}, {hi}{')' if self.high is None else ']'}"


def setting(default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING,
            low: float | None = None, high: float | None = None, low_open: bool = False,
            choices: tuple[Any, ...] | None = None, path: bool = False) -> Any:
    """Declares a config dataclass field with its valid range, checked by :func:`build_config`.

    Example::

        epochs: int = setting(8, low=1)
        lr: float = setting(1e-3, low=0, low_open=True)
    """
    check = Check(low, high, low_open, tuple(choices) if choices is not None else None, path)
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata={"check": check})
    return dataclasses.field(default=default, metadata={"check": check})


def build_config(cls: type[C], values: Mapping[str, Any], owner: str) -> C:
    """Builds a dataclass config from a mapping, rejecting unknown keys and out-of-range values.

    Values given as strings (command-line overrides) are converted to the field's type;
    floats must be finite. A dotted key (``data.min_images``) sets one entry of a mapping
    setting. Fields declared with :func:`setting` are checked against their range.

    Args:
        cls: A dataclass type.
        values: Field name -> value.
        owner: Who the config belongs to, for messages.

    Raises:
        BenchError: An unknown key, a missing required key or a value of the wrong type or
            out of range.
    """
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        head, dot, rest = str(key).partition(".")
        if head not in fields:
            close = difflib.get_close_matches(head, list(fields), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise BenchError(f"{owner} has no setting {head!r}{hint}")
        if dot:
            if "dict" not in str(fields[head].type):
                raise BenchError(f"{owner} setting {head!r} is not a mapping; set it as {head}=VALUE")
            nested.setdefault(head, {})[rest] = value
            continue
        kwargs[key] = _coerce(value, fields[key].type, f"{owner} setting {key!r}")
    for head, entries in nested.items():
        base = kwargs.get(head)
        if base is None:
            default = fields[head].default_factory if fields[head].default_factory is not dataclasses.MISSING else None
            base = default() if default else {}
        merged = dict(base)
        for dotted, value in entries.items():
            _set_dotted(merged, dotted.split("."), value)
        kwargs[head] = merged
    try:
        config = cls(**kwargs)
    except TypeError as exc:
        raise BenchError(f"{owner}: {exc}") from None
    for name, f in fields.items():
        check = f.metadata.get("check")
        value = getattr(config, name)
        if check is not None and value is not None:
            check.validate(value, f"{owner} setting {name!r}")
    return config


def _set_dotted(target: dict[str, Any], path: list[str], value: Any) -> None:
    for part in path[:-1]:
        inner = target.get(part)
        target[part] = dict(inner) if isinstance(inner, Mapping) else {}
        target = target[part]
    target[path[-1]] = yaml.safe_load(value) if isinstance(value, str) else value


def _coerce(value: Any, annotation: Any, where: str) -> Any:
    kind = str(annotation)
    if isinstance(value, str) and value.lower() in {"none", "null"} and "None" in kind:
        return None
    if kind.startswith("dict"):
        if not isinstance(value, Mapping):
            raise BenchError(f"{where} is a mapping, got {value!r}; set its entries as {where.split()[-1].strip(chr(39))}.KEY=VALUE")
        return dict(value)
    if not isinstance(value, str):
        if isinstance(value, list):
            return tuple(value)
        if isinstance(value, bool) and not kind.startswith("bool"):
            raise BenchError(f"{where} expects {kind}, got {value!r}")
        if kind.startswith("int") and isinstance(value, float):
            if not value.is_integer():
                raise BenchError(f"{where} expects an integer, got {value!r}")
            return int(value)
        if kind.startswith("float") and isinstance(value, (int, float)):
            if not math.isfinite(value):
                raise BenchError(f"{where} must be finite, got {value!r}")
            return float(value)
        return value
    try:
        if kind.startswith("int"):
            return int(value)
        if kind.startswith("float"):
            number = float(value)
            if not math.isfinite(number):
                raise BenchError(f"{where} must be finite, got {value!r}")
            return number
        if kind.startswith("bool"):
            if value.lower() not in {"true", "false", "1", "0"}:
                raise ValueError(value)
            return value.lower() in {"true", "1"}
    except ValueError:
        raise BenchError(f"{where} expects {kind}, got {value!r}") from None
    return value
