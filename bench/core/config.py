"""Profiles: YAML presets (smoke / quick / paper) resolved into typed config objects."""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import math
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Mapping, TypeVar

import yaml

from bench.core.coerce import NONE_WORDS, coerce, dataclass_type, field_default, field_types, is_mapping, is_optional
from bench.errors import BenchError

PROFILES = ("smoke", "quick", "paper")
C = TypeVar("C")


def flatten(prefix: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """Flattens nested settings into ``prefix + a.b.c`` keys (as cells log and estimate them)."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, Mapping):
            out.update(flatten(f"{prefix}{key}.", value))
        else:
            out[f"{prefix}{key}"] = value
    return out


def load_preset(package: str, name: str, profile: str, owner: str = "") -> dict[str, Any]:
    """Returns a preset's ``defaults`` merged with one profile's section.

    Args:
        package: Package holding ``presets/<name>.yaml`` (e.g. ``"tasks"``).
        name: The preset file's stem (usually the task or attack name).
        profile: Section to merge over the defaults.
        owner: Whose preset it is, for messages (default: ``<package> '<name>'``).

    Raises:
        BenchError: The preset file is missing, or has no such profile.
    """
    owner = owner or f"{package} {name!r}"
    path = resources.files(package) / "presets" / f"{name}.yaml"
    if not path.is_file():
        raise BenchError(f"{owner} has no preset file {package}/presets/{name}.yaml")
    data = _parsed(path)
    if profile not in data:
        known = ", ".join(k for k in data if k != "defaults")
        raise BenchError(f"{owner}: preset {name!r} has no profile {profile!r} (profiles: {known})")
    return copy.deepcopy(deep_merge(data.get("defaults") or {}, data[profile] or {}))


def _parsed(path: Any) -> dict[str, Any]:
    """Returns a preset file's parsed YAML, parsed once per version of the file (planning a grid builds many tasks).

    The cached mapping is never handed out: :func:`load_preset` returns a deep copy of what it merges.
    """
    try:
        stat = os.stat(str(path))
    except OSError:  # not a plain file (a zipped package): parsed each time
        return yaml.safe_load(path.read_text()) or {}
    return _parsed_file(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=512)
def _parsed_file(path: str, mtime_ns: int, size: int) -> dict[str, Any]:
    return yaml.safe_load(Path(path).read_text()) or {}


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
        infinite: ``inf`` is a valid value (a non-private epsilon), besides finite ones.
    """

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    choices: tuple[Any, ...] | None = None
    path: bool = False
    infinite: bool = False

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
            choices: tuple[Any, ...] | None = None, path: bool = False, infinite: bool = False) -> Any:
    """Declares a config dataclass field with its valid range, checked by :func:`build_config`.

    Example::

        epochs: int = setting(8, low=1)
        lr: float = setting(1e-3, low=0, low_open=True)
    """
    check = Check(low, high, low_open, tuple(choices) if choices is not None else None, path, infinite)
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata={"check": check})
    return dataclasses.field(default=default, metadata={"check": check})


def build_config(cls: type[C], values: Mapping[str, Any], owner: str) -> C:
    """Builds a dataclass config from a mapping, rejecting unknown keys and out-of-range values.

    Values are converted by the field's annotation: strings (command-line overrides) to
    numbers and booleans (floats must be finite), ``none`` to None where the field is
    optional, strings such as ``"128,64"`` or ``"128x64"`` and lists to tuples (their
    elements typed by the annotation, ``tuple[int, ...]``, else by the default's), and
    mappings to nested dataclass fields, built recursively. A dotted key sets one entry
    of a mapping setting (``data.min_images``: the entry is the dataset loader's to
    check) or one setting of a nested dataclass (``sub.lr``). Fields declared with
    :func:`setting` are checked against their range.

    Args:
        cls: A dataclass type.
        values: Field name (or dotted path) -> value.
        owner: Who the config belongs to, for messages (``task 'fewshot_celeba'``).

    Raises:
        BenchError: An unknown key (with the closest known one at its level), a missing
            required key, or a value of the wrong type or out of range.
    """
    return _build(cls, values, owner, "")


def did_you_mean(name: str, known: Iterable[str], prefix: str = "") -> str:
    """Returns ``"; did you mean 'X'?"`` for the known name closest to ``name``, else ``""``.

    Args:
        name: What was given.
        known: The valid names.
        prefix: Prepended to the suggestion (``data.`` for a nested setting).
    """
    close = difflib.get_close_matches(str(name), [str(k) for k in known], n=1)
    return f"; did you mean {prefix + close[0]!r}?" if close else ""


def _build(cls: type[C], values: Mapping[str, Any], owner: str, prefix: str) -> C:
    """Builds ``cls`` from ``values``; ``prefix`` is the dotted path of a nested config."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    types = field_types(cls)
    given: dict[str, Any] = {}
    dotted: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        head, dot, rest = str(key).partition(".")
        if head not in fields:
            raise BenchError(f"{owner} has no setting {prefix + head!r}{did_you_mean(head, fields, prefix)}")
        if not dot:
            given[head] = value
        elif dataclass_type(types[head]) is None and not is_mapping(types[head]):
            raise BenchError(f"{owner} setting {prefix + head!r} is not a mapping; set it as {prefix + head}=VALUE")
        else:
            dotted.setdefault(head, {})[rest] = value
    kwargs: dict[str, Any] = {}
    for name in [n for n in fields if n in given or n in dotted]:
        where, tp = f"{owner} setting {prefix + name!r}", types[name]
        if dataclass_type(tp) is not None:
            kwargs[name] = _nested(fields[name], tp, given, dotted.get(name, {}), (owner, f"{prefix}{name}."))
        elif name in dotted:
            base = given[name] if name in given else field_default(fields[name])
            merged = dict(coerce(base, tp, where, None) or {})
            for path, value in dotted[name].items():
                _set_dotted(merged, path.split("."), value)
            kwargs[name] = merged
        elif getattr(fields[name].metadata.get("check"), "infinite", False) and _is_infinity(given[name]):
            kwargs[name] = math.inf
        else:
            kwargs[name] = coerce(given[name], tp, where, field_default(fields[name]))
    try:
        config = cls(**kwargs)
    except TypeError as exc:
        raise BenchError(f"{owner}: {exc}") from None
    for name, f in fields.items():
        check = f.metadata.get("check")
        value = getattr(config, name)
        if check is not None and value is not None:
            check.validate(value, f"{owner} setting {prefix + name!r}")
    return config


def _is_infinity(value: Any) -> bool:
    """Whether a given value is +infinity (``inf``, ``infinity``, ``.inf`` in YAML, or the float)."""
    if isinstance(value, str):
        return value.strip().lower() in ("inf", "+inf", "infinity", ".inf")
    return isinstance(value, float) and value == math.inf


def _nested(f: dataclasses.Field, tp: Any, given: Mapping[str, Any], dotted: Mapping[str, Any],
            where: tuple[str, str]) -> Any:
    """Builds a nested dataclass setting from its given value (mapping or instance) and dotted keys."""
    owner, prefix = where
    sub = dataclass_type(tp)
    base = given[f.name] if f.name in given else field_default(f)
    if isinstance(base, str) and base.strip().lower() in NONE_WORDS and is_optional(tp):
        base = None
    if base is None and not dotted and f.name in given:
        if not is_optional(tp):
            raise BenchError(f"{owner} setting {prefix[:-1]!r} cannot be none")
        return None
    if base is None:
        values: dict[str, Any] = {}
    elif isinstance(base, sub):
        values = {g.name: getattr(base, g.name) for g in dataclasses.fields(base)}
    elif isinstance(base, Mapping):
        values = dict(base)
    else:
        raise BenchError(f"{owner} setting {prefix[:-1]!r} is a group of settings, got {base!r}; "
                         f"set its entries as {prefix}NAME=VALUE")
    values.update(dotted)
    return _build(sub, values, owner, prefix)


def _set_dotted(target: dict[str, Any], path: list[str], value: Any) -> None:
    for part in path[:-1]:
        inner = target.get(part)
        target[part] = dict(inner) if isinstance(inner, Mapping) else {}
        target = target[part]
    target[path[-1]] = yaml.safe_load(value) if isinstance(value, str) else value
