"""Step 1 of a cell, the plan: names, parameters, settings, data and machine checked; nothing computed or written.

A mistake a user can make (an unknown name, a bad value, data the adversaries cannot use, a
cell the machine cannot hold) is a :class:`~bench.errors.BenchError` here, before any work.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from bench.cell import estimate
from bench.cell.estimate import Estimate
from bench.core.config import PROFILES, did_you_mean
from bench.core.keys import cell_key, source_digest
from bench.core.registry import attacks as attack_registry
from bench.core.registry import datasets as dataset_registry
from bench.core.registry import mechanisms as mechanism_registry
from bench.core.registry import tasks as task_registry
from bench.errors import BenchError
from bench.storage.folders import check_writable_folder
from bench.system import bounds, precision

if TYPE_CHECKING:  # imported where a cell is planned past its names: a mistyped name is answered without torch
    import torch

    from bench.core.interfaces import Mechanism, RunContext, Task

SEED_LIMIT = 2**63
"""Seeds are non-negative 63-bit integers (they feed int64 arithmetic in the streams)."""


@dataclass(frozen=True)
class RunConfig:
    """What one ``bench run`` computes and where it writes.

    Attributes:
        task: Registered task (benchmark) name.
        mechanism: Registered mechanism name.
        params: Mechanism parameters (strings from the CLI or Python values).
        seed: Base seed.
        profile: smoke, quick or paper.
        device: auto, cpu or cuda (or cuda:N).
        data_root: Root of real datasets.
        results_dir: Where MLflow's default database and artifacts live.
        cache_dir: Releases and trained models; defaults to ``results_dir/cache``.
        attacks: Adversaries to run; None means the task's defaults.
        overrides: Section ("task" or an attack name) -> setting -> value.
        tracking_uri: MLflow tracking URI overriding the default.
        split: Where utility and attacks are measured: ``test``, or ``val`` for tuning
            (part of the cell key: a validation cell is never a test cell).
        verify_data: Fingerprint real datasets by their files' bytes (slower) rather than
            by size and modification time.
        precision: ``fp32``, or ``bf16`` mixed precision for the task's networks
            (:mod:`bench.system.precision`; part of the cell key). Adversaries always run in fp32.
        allow_long: Run settings whose estimated time is beyond :data:`bench.cell.estimate.BOUND_S`
            (``--allow-long``); not part of the cell key.
    """

    task: str
    mechanism: str
    params: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    profile: str = "quick"
    device: str = "auto"
    data_root: Path | None = None
    results_dir: Path = Path("results")
    cache_dir: Path | None = None
    attacks: tuple[str, ...] | None = None
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    tracking_uri: str | None = None
    split: str = "test"
    verify_data: bool = False
    precision: str = precision.DEFAULT
    allow_long: bool = False

    @property
    def cache(self) -> Path:
        """The cache directory in use."""
        return self.cache_dir or self.results_dir / "cache"


@dataclass
class Plan:
    """A validated cell: objects built, nothing computed or written yet."""

    config: RunConfig
    task: Task
    mechanism: Mechanism
    attacks: dict[str, Any]
    key: str
    device: torch.device
    protocol: str = ""
    """The board's protocol key (:func:`bench.cell.protocol.protocol_key` less the task's entry settings)."""
    estimate: Estimate | None = None
    """How long the cell is expected to take (:mod:`bench.cell.estimate`), before any earlier cell refines it."""


def check_seed(seed: Any) -> None:
    """Checks that a seed (``--seed``) is an integer in [0, 2^63) (see :data:`SEED_LIMIT`).

    Raises:
        BenchError: Not an integer, negative, or too large.
    """
    if not (isinstance(seed, int) and 0 <= seed < SEED_LIMIT):
        raise BenchError(f"--seed must be an integer in [0, 2^63), got {seed!r}")


def plan(config: RunConfig, memo: dict[Any, Any] | None = None) -> Plan:
    """Validates names, parameters, profile and device without computing anything.

    Args:
        config: The cell.
        memo: Where a caller that plans many cells and keeps only their keys
            (:func:`bench.scale.grid.expand`) lets cells share what does not depend on the
            mechanism, its parameters or the seed: the folders' checks, the task, the
            adversaries, the data's checks and the protocol key, worked out once per distinct
            setting (the same checks, in the same order, as without it). The cells' plans
            then share their task and attack objects.

    Raises:
        BenchError: Any mistake in the configuration.
    """
    if config.profile not in PROFILES:
        raise BenchError(f"unknown profile {config.profile!r}{did_you_mean(config.profile, PROFILES)} "
                         f"(use {', '.join(PROFILES)})")
    check_seed(config.seed)
    for flag, folder in (("--results-dir", config.results_dir), ("--cache-dir", config.cache)):
        if memo is None or ("folder", flag, Path(folder)) not in memo:
            check_writable_folder(flag, Path(folder))
            if memo is not None:
                memo["folder", flag, Path(folder)] = True
    if config.split not in ("test", "val"):
        raise BenchError(f"unknown evaluation split {config.split!r} (use test, or val for tuning)")
    for registry, name in ((task_registry, config.task), (mechanism_registry, config.mechanism)):
        if name not in registry:  # answered from the registry's index where one is in use: nothing imported
            registry.get(name)  # raises "unknown ..., did you mean"
    task_cls = task_registry.get(config.task)
    mechanism = mechanism_registry.get(config.mechanism)(**config.params)
    setting = None if memo is None else _setting(config)
    if setting is not None and setting in memo:
        task, attacks, device, options, board_protocol = memo[setting]
    else:
        task, attacks, device, options, board_protocol = _plan_setting(config, task_cls)
        if setting is not None:
            memo[setting] = (task, attacks, device, options, board_protocol)
    key = cell_key(
        config.task, config.mechanism, type(mechanism).version, mechanism.config, config.seed, config.profile, options,
        source_digest(type(mechanism)),
    )
    from bench.cell.preflight import preflight

    expected = estimate.estimate_cell(config.task, config.profile, task, attacks, mechanism, config.mechanism,
                                      config.overrides, given_params=config.params)
    estimate.check_bound(expected, config.allow_long)
    preflight(config.mechanism, mechanism, device)  # a plugin's conformance, once per process
    return Plan(config, task, mechanism, attacks, key, device, board_protocol, expected)


def _setting(config: RunConfig) -> Any:
    """Returns what :func:`_plan_setting` reads of a cell, as a hashable value (None when it cannot be one)."""
    try:
        setting = (config.task, config.profile, _frozen(config.overrides), _frozen(config.attacks), config.device,
                   config.precision, config.split, _frozen(config.data_root))
        hash(setting)
    except TypeError:
        return None
    return setting


def _frozen(value: Any) -> Any:
    """Returns a hashable form of settings that tells apart every value that could plan differently (1, 1.0, "1")."""
    if isinstance(value, dict):
        return ("dict", tuple(sorted(((repr(k), _frozen(v)) for k, v in value.items()), key=lambda kv: kv[0])))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_frozen(v) for v in value))
    return (type(value).__name__, repr(value))


def _plan_setting(config: RunConfig, task_cls: type[Task]) -> tuple[Task, dict[str, Any], torch.device,
                                                                      dict[str, Any], str]:
    """Plans what a cell's key needs besides its mechanism: task, adversaries, device, data checks, protocol.

    Returns:
        The task, the adversaries, the device, the key's options and the board's protocol key.

    Raises:
        BenchError: Any mistake in these settings or data the task or adversaries cannot use.
    """
    from bench.cell.attribute_checks import check_attributes, unlabelled_defaults
    from bench.cell.protocol import face_crop_attacks, protocol_key
    from bench.release.dataset import BOX_SOURCES
    from bench.storage.cache import warn
    from bench.system.devices import resolve_device

    known = {"task", "release", *(config.attacks if config.attacks is not None else task_cls.attacks)}
    unknown = sorted(set(config.overrides) - known)
    if unknown:
        raise BenchError(f"--set: no section {unknown[0]!r}{did_you_mean(unknown[0], known)} "
                         "(use task.NAME=VALUE, ATTACK.NAME=VALUE or release.boxes=detect)")
    release_options = dict(config.overrides.get("release", {}))
    if set(release_options) - {"boxes"} or release_options.get("boxes", "dataset") not in BOX_SOURCES:
        raise BenchError(f"--set release: only release.boxes={'|'.join(BOX_SOURCES)} is known, got {release_options}")
    task = task_cls(config.profile, config.overrides.get("task"))
    attack_names = config.attacks if config.attacks is not None else task_cls.attacks
    declared = getattr(task_cls, "benchmark", None)
    attacks = {name: attack_registry.get(name)(config.profile, declared.settings_of(name, config.overrides.get(name),
                                                                                    config.profile)
                                               if declared is not None else config.overrides.get(name))
               for name in attack_names}
    device = resolve_device(config.device)
    precision.check(config.precision, device, task.owner, task_cls.precisions)
    if config.split == "val":
        unable = [f"task {config.task!r}"] if not task_cls.validation else []
        unable += [f"attack {name!r}" for name, a in attacks.items() if not type(a).validation]
        if unable:
            raise BenchError(f"{' and '.join(unable)} cannot measure on a validation split, so tuning would "
                             "select on test; tune another benchmark or with --attacks naming attacks that can")
    for name, attack in attacks.items():
        needs = type(attack).requires
        if needs and needs not in task_cls.provides:
            offering = [t for t in task_registry.list() if needs in task_registry.get(t).provides]
            raise BenchError(f"attack {name!r} needs a task that provides {needs!r} (such as "
                             f"{', '.join(offering[:3]) or 'none registered'}); task {config.task!r} does not")
    bounds.check_cell(task, attacks, None, device, config.overrides)  # from the options, before inspect counts
    shape = dataset_registry.get(task.dataset)().inspect(config.data_root, task.data_options())
    bounds.check_cell(task, attacks, shape, device, config.overrides)
    task.check_data(shape, config.split)
    task.check_other_data(config.data_root, config.split)
    left_out = unlabelled_defaults(task, attacks, shape) if config.attacks is None else {}
    if left_out:
        attacks = {name: a for name, a in attacks.items() if name not in left_out}
        attack_names = tuple(attacks)
    cropped = face_crop_attacks(task_cls)
    for name, attack in attacks.items():
        attack.check_data(None if name in cropped else shape, config.split)
    check_attributes(task, attacks, shape)
    if left_out:  # said once every check has passed: a refused cell ends in its one error line
        warn(f"left out {', '.join(left_out)}: {next(iter(left_out.values()))}; privacy comes from "
             f"{', '.join(attacks)} (name adversaries with --attacks to change it)")
    options: dict[str, Any] = {"overrides": config.overrides, "attacks": list(attack_names),
                               "protocol": protocol_key(task, attacks)}
    if config.split != "test":
        options["split"] = config.split
    if config.precision != precision.DEFAULT:
        options["precision"] = config.precision
    board_protocol = protocol_key(task, attacks, leave_out=task_cls.entry_settings)
    return task, attacks, device, options, board_protocol


def run_context(planned: Plan, log: Callable[[str], None], progress: Callable[..., Any] | None) -> RunContext:
    """Returns what the task and the adversaries of a planned cell see of it (device, seed, profile, folders)."""
    from bench.core.interfaces import RunContext

    cfg = planned.config
    return RunContext(
        device=planned.device, seed=cfg.seed, profile=cfg.profile, data_root=cfg.data_root, cache_dir=cfg.cache,
        options={}, eval_split=cfg.split, benchmark=cfg.task, task=planned.task, log=log,
        progress=progress or (lambda it, total=None, desc=None: it),
    )
