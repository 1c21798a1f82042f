"""Benchmarks: a task kind on one dataset with its adversaries and their targets, declared once.

A benchmark is everything a cell needs besides the mechanism, and one call declares it
(the built-in ones are the table in ``tasks/benchmarks.py``)::

    declare_benchmark("reid_market1501", Reid, "market1501", ("attribute_inference", "denoise"),
                      attributes=("gender",), description="...")

The call registers a :class:`Benchmark` under the name in ``bench.core.registry.benchmarks``
and a task class (a subclass of the kind bound to the dataset, adversaries and preset)
under the same name in ``bench.core.registry.tasks``, so ``bench run --task NAME`` and every
cell key are unchanged. Its settings are ``tasks/presets/<name>.yaml`` (``preset=`` names
another benchmark's file to share it); a missing file is a BenchError when a cell is
planned. Adversaries that infer attributes read them from the run's benchmark
(:func:`declared_attributes`, :func:`declared_targets`), never from their own presets.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any, Callable, Mapping

from bench.core import registry
from bench.core.config import PROFILES
from bench.errors import BenchError

if TYPE_CHECKING:
    from bench.core.interfaces import RunContext

TARGETS = ("identity", "attributes")
"""What an adversary that first undoes the mechanism (``denoise``) goes on to attack."""


@dataclass(frozen=True)
class Benchmark:
    """One benchmark: a task kind on a dataset, its adversaries and what they target.

    Attributes:
        name: Registered name (also the task's name and the cell's ``task``).
        kind: The Task subclass that measures utility (``FewShot``, ``Reid``, ...).
        dataset: Registered dataset name.
        attacks: The adversaries every cell runs by default (``--attacks`` overrides).
        attributes: Attributes the attribute adversaries infer (``attribute_inference``,
            and ``denoise`` after denoising), in order; empty: none.
        targets: What ``denoise`` attacks after denoising (``identity``, ``attributes``);
            None: ``attributes`` when some are declared, else ``identity``.
        preset: Stem of the preset file in ``tasks/presets/``; empty: ``name``.
        description: One line for ``bench list``.
        attack_settings: Attack name -> settings this benchmark's data needs (e.g. fewer
            enrolment images for folders of 10 photos a person); ``--set`` overrides them.
            A profile's name (``quick``) keys settings for that profile only.
        task_settings: Task settings that define this benchmark (a classification
            protocol): applied over the preset, and ``--set`` may not change them, since a
            board compares like with like.
        face_crops: Adversaries that identify faces and see the data's face crops instead
            of its images (scenes whose faces have identities; :mod:`bench.release.facecrops`).
        optional_face_crops: Empty: the data always has a face table, and a cell whose data
            lacks one fails. Otherwise the data may lack identities (ImageNet's are the
            user's to supply) and this says how to supply them: such a cell skips the
            ``face_crops`` adversaries and records why in ``Result.skipped_attacks``.
    """

    name: str
    kind: type
    dataset: str
    attacks: tuple[str, ...] = ()
    attributes: tuple[str, ...] = ()
    targets: tuple[str, ...] | None = None
    preset: str = ""
    description: str = ""
    attack_settings: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    task_settings: Mapping[str, Any] = field(default_factory=dict)
    face_crops: tuple[str, ...] = ()
    optional_face_crops: str = ""

    def settings_of(self, attack: str, overrides: Mapping[str, Any] | None, profile: str | None = None
                    ) -> dict[str, Any]:
        """Returns an attack's settings for this benchmark at ``profile``: its declared ones (those of every
        profile, then the profile's own) updated by ``overrides``."""
        declared = self.attack_settings.get(attack, {})
        common = {k: v for k, v in declared.items() if k not in PROFILES}
        return {**common, **(declared.get(profile, {}) if profile else {}), **(overrides or {})}

    @property
    def preset_file(self) -> str:
        """The preset file, relative to the package root: ``tasks/presets/<stem>.yaml``."""
        return f"tasks/presets/{self.preset or self.name}.yaml"

    def has_preset(self) -> bool:
        """Whether the preset file exists."""
        return (resources.files("tasks") / "presets" / f"{self.preset or self.name}.yaml").is_file()

    def denoise_targets(self) -> tuple[str, ...]:
        """Returns what ``denoise`` attacks after denoising (see ``targets``)."""
        if self.targets is not None:
            return self.targets
        return ("attributes",) if self.attributes else ("identity",)


def declare_benchmark(
    name: str,
    kind: type,
    dataset: str,
    attacks: tuple[str, ...] = (),
    *,
    attributes: tuple[str, ...] = (),
    targets: tuple[str, ...] | None = None,
    preset: str = "",
    description: str = "",
    attack_settings: Mapping[str, Mapping[str, Any]] | None = None,
    task_settings: Mapping[str, Any] | None = None,
    face_crops: tuple[str, ...] = (),
    optional_face_crops: str = "",
) -> Benchmark:
    """Declares a benchmark: registers it and its task class under ``name``.

    Args:
        name: The benchmark's name (``fewshot_celeba``).
        kind: The Task subclass measuring utility.
        dataset: Registered dataset name (checked when a cell is planned, so a benchmark
            may be declared before its dataset's module exists).
        attacks: Default adversaries.
        attributes: Attributes the attribute adversaries infer.
        targets: What ``denoise`` attacks after denoising (default: see :class:`Benchmark`).
        preset: Another benchmark's preset stem to share; empty: ``name``.
        description: One line for ``bench list``; empty: the kind's.
        attack_settings: Attack name -> settings the benchmark's data needs.
        task_settings: Task settings fixed by the benchmark (``{"protocol": "obf_obf"}``).
        face_crops: Adversaries (among ``attacks``) that attack the data's face crops.
        optional_face_crops: How to supply face identities when the data may lack them
            (see :class:`Benchmark`); empty: they are always there.

    Returns:
        The declaration.

    Raises:
        ValueError: A malformed declaration or a name already registered (the
            declaring module's bug, like a duplicate ``@register_*``).
    """
    from bench.core.interfaces import Task

    if not (isinstance(kind, type) and issubclass(kind, Task)):
        raise ValueError(f"benchmark {name!r}: kind must be a Task subclass, got {kind!r}")
    for what, names in (("attacks", attacks), ("attributes", attributes), ("targets", targets or ()),
                        ("face_crops", face_crops)):
        if isinstance(names, str) or not all(isinstance(n, str) and n for n in names):
            raise ValueError(f"benchmark {name!r}: {what} must be a tuple of names, got {names!r}")
    if not isinstance(optional_face_crops, str) or (optional_face_crops and not face_crops):
        raise ValueError(f"benchmark {name!r}: optional_face_crops must be a text, and needs face_crops")
    unknown = set(targets or ()) - set(TARGETS)
    if unknown or targets == ():
        raise ValueError(f"benchmark {name!r}: targets must name some of {', '.join(TARGETS)}, got {targets!r}")
    declared = Benchmark(name, kind, dataset, tuple(attacks), tuple(attributes),
                         None if targets is None else tuple(targets), preset, description or kind.description,
                         {a: dict(v) for a, v in (attack_settings or {}).items()}, dict(task_settings or {}),
                         tuple(face_crops), optional_face_crops)
    module = sys._getframe(1).f_globals.get("__name__", kind.__module__)
    task = type(_class_name(name), (kind,), {
        "__module__": module,
        "__doc__": declared.description or kind.__doc__,
        "dataset": dataset,
        "attacks": declared.attacks,
        "description": declared.description,
        "preset_name": preset,
        "benchmark": declared,
    })
    registry.tasks.register(name)(task)
    registry.benchmarks.register(name)(declared)
    return declared


def _class_name(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.replace("-", "_").replace(".", "_").split("_"))


def declared_attributes(ctx: "RunContext", dataset: str, attack: str) -> tuple[str, ...]:
    """Returns the attributes the run's benchmark declares for the attribute adversaries.

    Args:
        ctx: The run; ``ctx.benchmark`` names its benchmark.
        dataset: The dataset attacked (``clean.dataset``), used when the run names none.
        attack: The adversary asking (for messages and to choose among benchmarks).

    Raises:
        BenchError: The run names no benchmark and benchmarks of the dataset disagree.
    """
    return _declared(ctx, dataset, attack, lambda b: b.attributes)


def declared_targets(ctx: "RunContext", dataset: str, attack: str) -> tuple[str, ...]:
    """Returns what the run's benchmark has ``denoise`` attack after denoising (empty: no benchmark).

    Raises:
        BenchError: The run names no benchmark and benchmarks of the dataset disagree.
    """
    return _declared(ctx, dataset, attack, Benchmark.denoise_targets)


def _declared(ctx: "RunContext", dataset: str, attack: str,
              pick: Callable[[Benchmark], tuple[str, ...]]) -> tuple[str, ...]:
    """Reads a declaration from the run's benchmark, else from the benchmarks of the dataset.

    Cells name their benchmark in ``ctx.benchmark``. A context made without one (a test, a
    script) is served by the benchmarks declared on ``dataset`` (those running ``attack``
    first) as long as they agree.
    """
    name = getattr(ctx, "benchmark", "") or ""
    if name and name in registry.benchmarks:
        return pick(registry.benchmarks.get(name))
    on_dataset = [registry.benchmarks.get(n) for n in registry.benchmarks.list()]
    on_dataset = [b for b in on_dataset if b.dataset == dataset]
    running = [b for b in on_dataset if attack in b.attacks] or on_dataset
    answers = {b.name: pick(b) for b in running}
    if len(set(answers.values())) > 1:
        shown = ", ".join(f"{n}: {', '.join(v) or 'none'}" for n, v in answers.items())
        raise BenchError(f"attack {attack!r}: the benchmarks of dataset {dataset!r} declare different targets "
                         f"({shown}); the run must name its benchmark (RunContext.benchmark)")
    return next(iter(answers.values()), ())
