"""Plan-time time estimates: how long a cell will take, and the bound beyond which its settings are refused.

A cell's time is the time of its stages (data, release, task, each adversary) measured on
a reference cell of its kind, scaled by the ratio of every work setting to the reference's
(epochs, episodes, images, identities, image side squared, network width squared, a
mechanism parameter its :class:`~bench.core.params.Param` declares ``cost="linear"``).
The reference is this machine's own earlier cells of the task and profile when the
tracking store holds any (:mod:`bench.cell.estimate_store`), else the median stage times
of the shipped baselines' cells (:mod:`bench.cell.estimate_shipped`, on the CPU they ran on), so an
estimate costs no computation. Settings given by the user (``--set``, ``--param``) that
raise the estimate beyond :data:`BOUND_S` are refused in the plan, in one line naming
them, unless ``--allow-long`` is given; a profile's own preset is never refused.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from bench.cell.estimate_shipped import Reference, shipped_references
from bench.core.config import flatten
from bench.errors import BenchError

BOUND_S = 24 * 3600.0
"""Estimated seconds beyond which settings a user gave are refused without ``--allow-long``."""

ALLOW_LONG = "--allow-long"
"""The option that lifts the bound (declared once, :func:`bench.cli.common.add_allow_long_option`)."""

LINEAR = frozenset({
    "epochs", "adapt_epochs", "denoiser_epochs", "warmup_epochs", "episodes_per_epoch", "val_episodes",
    "test_episodes", "steps", "n_ids", "per_id", "n_train", "n_val", "n_test", "n_population", "classes",
    "images_per_class", "max_images", "max_ids", "max_classes", "identities", "images", "per_class",
    "test_per_class", "val_per_class", "enrol_per_id", "members", "population", "references", "canaries", "folds",
    "bootstrap", "train_way", "train_shot", "train_query", "depth", "denoiser_depth", "ssim_images", "mlp_dim",
})
"""Settings a stage's time grows with in proportion."""

SQUARE = frozenset({"size", "image_size", "input_size", "patch", "width", "denoiser_width"})
"""Settings a stage's time grows with as their square (an image side; a convolution's channels)."""

FAMILY = {"epochs": "trainings", "adapt_epochs": "trainings", "denoiser_epochs": "trainings",
          "warmup_epochs": "trainings", "episodes_per_epoch": "episodes", "val_episodes": "episodes",
          "test_episodes": "episodes"}
"""Settings that each scale one part of a stage (the noisy model's training or the denoiser's; training, validation
or test episodes): a stage scales by the mean of their factors, not their product."""

HERE = "AMD EPYC (AVX-512, 2 threads, shared with other jobs)"
SMOKE = "reference"


SMOKE_REFERENCES: dict[tuple[str, str], Reference] = {
    ("fewshot_synth_faces", "smoke"): Reference(
        {"data": 0.1, "task": 2.9, "attack.denoise": 6.9, "attack.face_reid": 0.8, "attack.face_reid_adapted": 1.7},
        {"pixelate": 0.1, "dp_latent": 149.0}, HERE, SMOKE),
    ("reid_synth_persons", "smoke"): Reference(
        {"data": 0.1, "task": 2.1, "attack.attribute_inference": 0.9, "attack.denoise": 4.0},
        {"pixelate": 0.1, "dp_latent": 171.0}, HERE, SMOKE),
    ("classify_synth_scenes_obf_obf", "smoke"): Reference(
        {"data": 0.1, "task": 2.3, "attack.denoise": 1.7, "attack.face_detect": 0.2, "attack.face_reid": 0.3,
         "attack.face_reid_adapted": 0.2}, {"pixelate": 0.1, "dp_latent": 93.3}, HERE, SMOKE),
    ("dp_vit_synth_objects", "smoke"): Reference(
        {"data": 0.2, "task": 4.2, "attack.membership": 5.1}, {"identity": 0.02}, HERE, SMOKE),
}
"""At smoke (no shipped board): one pixelate (or identity) and one dp_latent cell of each benchmark, the smaller of
their two times for each stage but the release (a first cell also trains the clean models that later cells find in
the cache). Every other profile's reference is worked out from the shipped cells (:func:`reference`)."""

UNKNOWN_STAGE_S = 60.0
"""Seconds assumed for an adversary that the reference cells did not run."""

FLOOR_S = 5.0
"""Seconds any cell takes at least (generating or reading its data, training its models): the start of a lower
bound for a benchmark and profile with no reference."""


@dataclass(frozen=True)
class Estimate:
    """The expected time of a cell (or of a command's cells).

    Attributes:
        seconds: Expected wall-clock seconds.
        stages: Stage -> expected seconds.
        given: ``name=value`` of the settings the user gave that scale it beyond its
            profile's preset, largest factor first.
        given_factor: The product of those factors (1 when none raises it).
        source: Where the per-stage times come from, for the message.
        lower: Whether it is only a lower bound (no reference for the benchmark and profile).
    """

    seconds: float
    stages: Mapping[str, float] = field(default_factory=dict)
    given: tuple[str, ...] = ()
    given_factor: float = 1.0
    source: str = ""
    lower: bool = False


def reference(task_name: str, profile: str) -> Reference | None:
    """Returns the reference cells' stage times of a benchmark at a profile: the shipped baselines' cells, else the
    smoke table (:data:`SMOKE_REFERENCES`), else None."""
    return shipped_references().get((task_name, profile)) or SMOKE_REFERENCES.get((task_name, profile))


def about(seconds: float) -> str:
    """Formats an estimate: ``40 s``, ``12 min``, ``3.5 h``, ``12 days``, ``3.2e+07 years``."""
    if not math.isfinite(seconds):
        return "forever"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:.1f} h"
    if seconds < 365 * 86400:
        return f"{seconds / 86400:.0f} days"
    years = seconds / (365.25 * 86400)
    return f"{years:,.0f} years" if years < 1e6 else f"{years:.1e} years"


def cell_settings(task: Any, attacks: Mapping[str, Any]) -> dict[str, Any]:
    """Returns a planned cell's resolved task and adversary settings, flat (``task.epochs``, ``attack.X.epochs``)."""
    settings = flatten("task.", dict(task.config_dict() or {}))
    for name, attack in attacks.items():
        settings.update(flatten(f"attack.{name}.", dict(attack.config_dict() or {})))
    return settings


@functools.lru_cache(maxsize=64)
def preset_settings(task: str, profile: str, attacks: tuple[str, ...]) -> dict[str, Any]:
    """Returns the flat settings of a benchmark's preset at a profile with these adversaries (no overrides)."""
    from bench.core.registry import attacks as attack_registry
    from bench.core.registry import tasks as task_registry

    task_cls = task_registry.get(task)
    declared = getattr(task_cls, "benchmark", None)
    built = {name: attack_registry.get(name)(profile, declared.settings_of(name, None, profile)
                                              if declared is not None else None) for name in attacks}
    return cell_settings(task_cls(profile, None), built)


def ratio(name: str, value: Any, reference: Any) -> float:
    """Returns how much a setting's value multiplies its stage's time against the reference value (1 if it does not)."""
    leaf = name.rsplit(".", 1)[-1]
    if leaf not in LINEAR and leaf not in SQUARE:
        return 1.0
    if isinstance(value, (list, tuple)) and isinstance(reference, (list, tuple)) and len(value) == len(reference) == 2:
        return ratio(name, value[0], reference[0]) ** 0.5 * ratio(name, value[1], reference[1]) ** 0.5
    if not (_number(value) and _number(reference)) or reference <= 0 or value <= 0:
        return 1.0
    factor = float(value) / float(reference)
    return factor * factor if leaf in SQUARE else factor


def stage_of(name: str, episodic: bool) -> tuple[str, ...] | str:
    """Returns the stage a setting scales: ``task``, ``attack.NAME``, or every stage for the data's counts."""
    if name.startswith("task.data."):
        return ("data", "release", "attacks") + (() if episodic else ("task",))
    if name.startswith("attack."):
        return ".".join(name.split(".")[:2])
    return "task"


def scale(settings: Mapping[str, Any], reference: Mapping[str, Any]) -> dict[str, tuple[str | tuple[str, ...], float]]:
    """Returns setting -> (the stage(s) it scales, its factor) for the work settings that differ from the reference."""
    episodic = "task.episodes_per_epoch" in settings
    out = {}
    for name, value in settings.items():
        if name in reference:
            factor = ratio(name, value, reference[name])
            if factor != 1.0 or name.rsplit(".", 1)[-1] in FAMILY:  # a family's mean counts its unchanged members
                out[name] = (stage_of(name, episodic), factor)
    return out


def mechanism_factors(cls: Any, config: Mapping[str, Any]) -> dict[str, float]:
    """Returns ``param -> factor`` of a mechanism's parameters declared ``cost="linear"`` against their defaults."""
    space = getattr(cls, "params", None) or {}
    out = {}
    for name in space:
        param, value = space[name], config.get(name)
        if getattr(param, "cost", None) == "linear" and _number(value) and _number(param.default) and param.default > 0:
            out[name] = float(value) / float(param.default)
    return out


def estimate_cell(task_name: str, profile: str, task: Any, attacks: Mapping[str, Any], mechanism: Any,
                  mechanism_name: str, overrides: Mapping[str, Mapping[str, Any]] | None = None,
                  given_params: Iterable[str] = ()) -> Estimate:
    """Estimates a planned cell's time from the reference of its kind, scaled by its settings.

    Args:
        task_name: The benchmark.
        profile: The profile.
        task: The planned task.
        attacks: Adversary name -> planned adversary.
        mechanism: The planned mechanism.
        mechanism_name: Its registered name.
        overrides: The ``--set`` settings (section -> name -> value): those that raise the
            estimate above the profile's preset are :attr:`Estimate.given`.
        given_params: The mechanism parameters the user gave.
    """
    release = mechanism_factors(type(mechanism), mechanism.config)
    shown = {name: f"{mechanism_name} {name}={mechanism.config[name]}" for name in given_params if name in release}
    return estimate_settings(task_name, profile, tuple(attacks), cell_settings(task, attacks), mechanism_name,
                             release, overrides or {}, shown)


def estimate_settings(task_name: str, profile: str, attack_names: tuple[str, ...], settings: Mapping[str, Any],
                      mechanism_name: str, release: Mapping[str, float],
                      overrides: Mapping[str, Mapping[str, Any]] | None = None,
                      shown: Mapping[str, str] | None = None) -> Estimate:
    """Estimates a cell's time from its flat settings (:func:`cell_settings`, or as an earlier run logged them).

    Only what departs from the profile's preset scales the reference; a benchmark and
    profile with no reference start from :data:`FLOOR_S`, so the estimate is then a lower bound.

    Args:
        task_name: The benchmark.
        profile: The profile.
        attack_names: Its adversaries.
        settings: Its resolved settings, flat.
        mechanism_name: The mechanism.
        release: The mechanism's cost factors (:func:`mechanism_factors`).
        overrides: The ``--set`` settings, to name those the user gave.
        shown: Mechanism parameter -> how to name it, for those the user gave.
    """
    ref = reference(task_name, profile)
    if ref is None:
        stages = {"cell": FLOOR_S}
        source = f"from {FLOOR_S:.0f} s, the least a cell takes: no {task_name} cell at {profile} has been timed"
    else:
        median = sorted(ref.release.values())[(len(ref.release) - 1) // 2]
        stages = {**{k: v for k, v in ref.stages.items() if not k.startswith("attack.")},
                  "release": ref.release.get(mechanism_name, median),
                  **{f"attack.{a}": ref.stages.get(f"attack.{a}", UNKNOWN_STAGE_S) for a in attack_names}}
        source = f"the {ref.where} {task_name} cells ({profile}) on {ref.cpu}"
    try:
        preset = preset_settings(task_name, profile, attack_names)
    except BenchError:  # a preset that needs a setting the user gave: nothing to scale against
        preset = dict(settings)
    scaled = scale(settings, preset)
    _apply(stages, scaled)
    for factor in release.values():
        stages["release" if "release" in stages else "cell"] *= factor
    given, given_factor = _given(scaled, release, overrides or {}, shown or {})
    return Estimate(sum(stages.values()), stages, given, given_factor, source, ref is None)


def _apply(stages: dict[str, float], scaled: Mapping[str, tuple[Any, float]]) -> None:
    """Multiplies each stage by its settings' factors: the mean within a family of alternatives, else the product."""
    for stage in stages:
        families: dict[str, list[float]] = {}
        product = 1.0
        for name, (where, factor) in scaled.items():
            targets = where if isinstance(where, tuple) else (where,)
            if stage in targets or stage == "cell" or ("attacks" in targets and stage.startswith("attack.")):
                family = FAMILY.get(name.rsplit(".", 1)[-1])
                if family is None:
                    product *= factor
                else:
                    families.setdefault(family, []).append(factor)
        stages[stage] *= product * math.prod(sum(f) / len(f) for f in families.values())


def _given(scaled: Mapping[str, tuple[Any, float]], release: Mapping[str, float],
           overrides: Mapping[str, Mapping[str, Any]], shown: Mapping[str, str]) -> tuple[tuple[str, ...], float]:
    """The user's settings that raise the cell above its preset (``name=value``, largest first), and their product."""
    found: list[tuple[float, str]] = []
    for name, (_, factor) in scaled.items():
        section, _, rest = name.partition(".")
        if section == "attack":
            section, _, rest = rest.partition(".")
        value = overrides.get(section, {}).get(rest)
        if value is not None and factor > 1:
            label = name if section == "task" else f"{section}.{rest}"
            found.append((factor, f"{label}={value}"))
    for name, factor in release.items():
        if name in shown and factor > 1:
            found.append((factor, shown[name]))
    found.sort(reverse=True)
    return tuple(text for _, text in found), math.prod(f for f, _ in found) if found else 1.0


def repeated(each: Estimate, times: int, given: str) -> Estimate:
    """Returns the estimate of ``times`` runs of ``each`` (tune trials), the count named as the user's ``given``."""
    return Estimate(each.seconds * times, {k: v * times for k, v in each.stages.items()}, (given, *each.given),
                    each.given_factor * times, each.source, each.lower)


def check_bound(estimate: Estimate, allow_long: bool, what: str = "this cell") -> None:
    """Refuses settings the user gave that take ``what`` beyond :data:`BOUND_S`, unless ``allow_long``.

    Raises:
        BenchError: One line naming the settings, the estimate and the option that allows it.
    """
    if allow_long or estimate.seconds <= BOUND_S or not estimate.given or estimate.given_factor <= 1:
        return
    raise BenchError(f"{', '.join(estimate.given)}: {what} would take {describe(estimate)}, beyond the "
                     f"{about(BOUND_S)} bound; lower it, or pass {ALLOW_LONG} to run it anyway")


def describe(estimate: Estimate) -> str:
    """Returns ``about 3.5 h (from ...)``, or ``at least about ...`` for a lower bound."""
    source = estimate.source if estimate.lower else f"from {estimate.source}"
    return f"{'at least ' if estimate.lower else ''}about {about(estimate.seconds)} ({source})"


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
