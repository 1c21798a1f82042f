"""Checks of the loader options a user sets with ``--set task.data.NAME=VALUE``."""

from __future__ import annotations

from typing import Any, Mapping

from bench.errors import BenchError


def check_option_names(dataset: str, options: Mapping[str, Any], defaults: Mapping[str, Any]) -> None:
    """Raises a one-line BenchError for the first option the dataset does not know (with a "did you mean").

    Raises:
        BenchError: An unknown option, naming the valid ones.
    """
    from bench.core.config import did_you_mean

    for key in options:
        if key not in defaults:
            raise BenchError(f"{dataset}: unknown option {key!r}{did_you_mean(key, defaults, 'task.data.')} "
                             f"(valid: {', '.join(defaults)})")


def integer_option(dataset: str, key: str, value: Any, low: int, high: int | None = None) -> int:
    """Returns an option as an int in [low, high].

    Raises:
        BenchError: Not an integer (booleans are not), below ``low`` or above ``high``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value < low:
        raise BenchError(f"{dataset}: task.data.{key} must be an integer >= {low}, got {value!r}")
    if high is not None and value > high:
        raise BenchError(f"{dataset}: task.data.{key} must be at most {high}, got {value!r}")
    return int(value)
