"""Checks of the loader options a user sets with ``--set task.data.NAME=VALUE``."""

from __future__ import annotations

from typing import Any, Mapping

from bench.errors import BenchError

SYNONYMS: tuple[tuple[str, ...], ...] = (
    ("per_class", "per_id", "per_identity", "per_person", "images_per_class", "images_per_id", "max_per_class",
     "max_images_per_class", "images_per_person"),
    ("max_classes", "max_ids", "max_identities", "max_people", "max_persons", "n_classes"),
    ("test_classes", "test_ids", "test_identities", "test_people", "n_test_classes", "n_test_ids"),
    ("min_test_classes", "min_test_ids", "min_test_identities", "min_test_people"),
)
"""Names users reach for that mean one shape option; every real loader names it by the first (issue 59)."""


def hint(key: str, defaults: Mapping[str, Any]) -> str:
    """Returns ``"; did you mean 'task.data.X'?"`` for an unknown option: its synonym the dataset knows, else the closest."""
    from bench.core.config import did_you_mean

    for group in SYNONYMS:
        if key in group:
            known = [name for name in group if name in defaults and name != key]
            if known:
                return f"; did you mean {'task.data.' + known[0]!r}?"
    return did_you_mean(key, defaults, "task.data.")


def check_option_names(dataset: str, options: Mapping[str, Any], defaults: Mapping[str, Any]) -> None:
    """Raises a one-line BenchError for the first option the dataset does not know (with a "did you mean").

    Raises:
        BenchError: An unknown option, naming the valid ones.
    """
    for key in options:
        if key not in defaults:
            raise BenchError(f"{dataset}: unknown option {key!r}{hint(key, defaults)} (valid: {', '.join(defaults)})")


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
