"""Settings given from Python, spelled as the command line spells them (so a cell from Python is the command line's cell)."""

from __future__ import annotations

from typing import Any, Mapping

from bench.errors import BenchError

DEFAULT_PROFILE = "smoke"
"""The API's profile when none is given (and no suite gives one): minutes on a CPU; pass ``quick`` for numbers."""


def cli_text(value: Any) -> Any:
    """Returns a number, bool or string as the command line spells it (``true`` for True); other values as they are.

    A setting's text is part of its cell's key, so a setting given from Python is the cell
    ``--set`` gives (``{"task.epochs": 1}`` and ``--set task.epochs=1`` are one cell).
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value) if isinstance(value, (int, float, str)) else value


def sections(settings: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Returns overrides by section from dotted (``task.epochs``) or nested (``{"task": {...}}``) settings.

    Values are spelled as ``--set`` spells them (:func:`cli_text`), so a
    cell run from Python is the cell the command line runs.

    Raises:
        BenchError: A dotted key without a section, or a section that is not a mapping.
    """
    out: dict[str, dict[str, Any]] = {}
    for key, value in dict(settings or {}).items():
        section, dot, name = str(key).partition(".")
        if dot and name:
            out.setdefault(section, {})[name] = cli_text(value)
        elif isinstance(value, Mapping):
            out.setdefault(section, {}).update({str(k): cli_text(v) for k, v in value.items()})
        else:
            raise BenchError(f"settings: {key!r} needs a section, e.g. 'task.{key}' (or {{'task': {{...}}}})")
    return out
