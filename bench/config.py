"""Profiles: YAML presets (smoke / quick / paper) resolved into typed config objects."""

from __future__ import annotations

import dataclasses
import difflib
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


def build_config(cls: type[C], values: Mapping[str, Any], owner: str) -> C:
    """Builds a dataclass config from a mapping, rejecting unknown keys.

    Values given as strings (command-line overrides) are converted to the field's type.

    Args:
        cls: A dataclass type.
        values: Field name -> value.
        owner: Who the config belongs to, for messages.

    Raises:
        BenchError: An unknown key, a missing required key or a value of the wrong type.
    """
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise BenchError(f"{owner} has no setting {key!r}{hint}")
        kwargs[key] = _coerce(value, fields[key].type, f"{owner} setting {key!r}")
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise BenchError(f"{owner}: {exc}") from None


def _coerce(value: Any, annotation: Any, where: str) -> Any:
    if not isinstance(value, str):
        if isinstance(value, list):
            return tuple(value)
        return value
    kind = str(annotation)
    try:
        if kind.startswith("int"):
            return int(value)
        if kind.startswith("float"):
            return float(value)
        if kind.startswith("bool"):
            if value.lower() not in {"true", "false", "1", "0"}:
                raise ValueError(value)
            return value.lower() in {"true", "1"}
    except ValueError:
        raise BenchError(f"{where} expects {kind}, got {value!r}") from None
    if value.lower() in {"none", "null"} and "None" in kind:
        return None
    return value
