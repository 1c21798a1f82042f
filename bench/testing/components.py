"""Conformance checks for registered tasks (benchmarks) and attacks, importable by plugin authors.

Each check takes a registered name and raises :class:`ConformanceError` with one line on a
violation; nothing is trained and no data is read, so the suite runs over every name in
seconds (the integration tests run the cells themselves)::

    from bench.testing.components import ATTACK_CHECKS, TASK_CHECKS

    @pytest.mark.parametrize("check", sorted(TASK_CHECKS))
    def test_my_benchmark(check):
        TASK_CHECKS[check]("my_benchmark")
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Callable

from bench.core.config import PROFILES
from bench.errors import BenchError
from bench.testing.mechanisms import ConformanceError

__all__ = ["ATTACK_CHECKS", "TASK_CHECKS", "check_attack", "check_task"]


def _task(name: str) -> type:
    from bench.core.registry import tasks

    return tasks.get(name)


def _attack(name: str) -> type:
    from bench.core.registry import attacks

    return attacks.get(name)


def _profiles_build(kind: str, cls: type, name: str) -> None:
    """Every profile's preset builds a config (typed settings, ranges checked)."""
    for profile in PROFILES:
        try:
            cls(profile)
        except BenchError as exc:
            raise ConformanceError(f"{kind} {name!r}: profile {profile!r} does not build: {exc}") from None


def _declares_metrics(kind: str, cls: type, name: str) -> None:
    """The primary metric is declared, and every metric says whether higher is better."""
    if not cls.primary or cls.primary not in cls.metrics:
        raise ConformanceError(f"{kind} {name!r}: primary metric {cls.primary!r} is not in its metrics")
    if not all(isinstance(v, bool) for v in cls.metrics.values()):
        raise ConformanceError(f"{kind} {name!r}: metrics must map names to higher-is-better booleans")


def _documented(kind: str, cls: type, name: str) -> None:
    """A one-line description for ``bench list`` and a docstring."""
    if not (cls.description or "").strip() or not inspect.getdoc(cls):
        raise ConformanceError(f"{kind} {name!r}: needs a description and a docstring")


def _versioned(owner: str, version: object) -> None:
    """A version is a positive int, or a tuple of them (its own and those it builds on): JSON in the cell key."""
    parts = version if isinstance(version, tuple) and version else (version,)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in parts):
        raise ConformanceError(f"{owner}: version must be a positive int or a tuple of them, got {version!r}")


def task_profiles(name: str) -> None:
    """Checks that the smoke, quick and paper presets build."""
    _profiles_build("task", _task(name), name)


def task_metrics(name: str) -> None:
    """Checks the declared metrics."""
    _declares_metrics("task", _task(name), name)


def task_documented(name: str) -> None:
    """Checks the description and docstring."""
    _documented("task", _task(name), name)


def task_precisions(name: str) -> None:
    """Checks that ``precisions`` is a tuple of known precisions with fp32 (:mod:`bench.system.precision`)."""
    from bench.system.precision import DEFAULT, PRECISIONS

    declared = _task(name).precisions
    if not isinstance(declared, tuple) or DEFAULT not in declared or not set(declared) <= set(PRECISIONS):
        raise ConformanceError(f"task {name!r}: precisions must be a tuple of {', '.join(PRECISIONS)} "
                               f"with {DEFAULT}, got {declared!r}")


def task_wiring(name: str) -> None:
    """Checks that the dataset and default attacks exist and that each attack's requirement is provided."""
    from bench.core.registry import attacks, datasets

    cls = _task(name)
    if cls.dataset not in datasets:
        raise ConformanceError(f"task {name!r}: dataset {cls.dataset!r} is not registered")
    for attack in cls.attacks:
        if attack not in attacks:
            raise ConformanceError(f"task {name!r}: default attack {attack!r} is not registered")
        needs = attacks.get(attack).requires
        if needs and needs not in cls.provides:
            raise ConformanceError(f"task {name!r}: attack {attack!r} requires {needs!r}, which the task does not provide")


def task_versioned(name: str) -> None:
    """Checks the task's and its dataset's ``version`` (part of every cell key)."""
    from bench.core.registry import datasets

    cls = _task(name)
    _versioned(f"task {name!r}", cls.version)
    if cls.dataset in datasets:
        _versioned(f"task {name!r}: dataset {cls.dataset!r}", datasets.get(cls.dataset).version)


def task_settings(name: str) -> None:
    """Checks that entry settings and tunable settings name real settings of the task's config."""
    cls = _task(name)
    task = cls("smoke")
    config = getattr(task, "config", None)
    fields = {f.name for f in dataclasses.fields(config)} if dataclasses.is_dataclass(config) else set()
    for prefix in cls.entry_settings:
        if prefix.split(".")[0] not in fields:
            raise ConformanceError(f"task {name!r}: entry setting {prefix!r} is not a setting of its config")
    for setting, param in cls.tunable.items():
        try:
            cls("smoke", {setting: param.default})
        except BenchError as exc:
            raise ConformanceError(f"task {name!r}: tunable {setting!r} cannot be set: {exc}") from None
    if cls.entry_settings and not task.entry_label():
        raise ConformanceError(f"task {name!r}: declares entry settings but gives no entry label")


def attack_profiles(name: str) -> None:
    """Checks that the smoke, quick and paper presets build."""
    _profiles_build("attack", _attack(name), name)


def attack_metrics(name: str) -> None:
    """Checks the declared metrics."""
    _declares_metrics("attack", _attack(name), name)


def attack_documented(name: str) -> None:
    """Checks the description and docstring."""
    _documented("attack", _attack(name), name)


def attack_versioned(name: str) -> None:
    """Checks the attack's ``version`` (part of every cell key)."""
    _versioned(f"attack {name!r}", _attack(name).version)


def attack_requirement(name: str) -> None:
    """Checks that a task provides what the attack requires, if it requires anything."""
    from bench.core.registry import tasks

    needs = _attack(name).requires
    if needs and not any(needs in tasks.get(t).provides for t in tasks.list()):
        raise ConformanceError(f"attack {name!r}: requires {needs!r}, which no registered task provides")


TASK_CHECKS: dict[str, Callable[[str], None]] = {
    "profiles": task_profiles, "metrics": task_metrics, "documented": task_documented, "wiring": task_wiring,
    "settings": task_settings, "versioned": task_versioned, "precisions": task_precisions,
}
ATTACK_CHECKS: dict[str, Callable[[str], None]] = {
    "profiles": attack_profiles, "metrics": attack_metrics, "documented": attack_documented,
    "requirement": attack_requirement, "versioned": attack_versioned,
}


def check_task(name: str) -> None:
    """Runs every task check on one registered name.

    Raises:
        ConformanceError: The first violation.
    """
    for check in TASK_CHECKS.values():
        check(name)


def check_attack(name: str) -> None:
    """Runs every attack check on one registered name.

    Raises:
        ConformanceError: The first violation.
    """
    for check in ATTACK_CHECKS.values():
        check(name)
