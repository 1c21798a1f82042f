"""The core objects: mechanisms, tasks, attacks, releases, run contexts and results."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping

import torch

from bench.core.claims import PrivacyClaim
from bench.core.config import build_config, load_preset
from bench.core.outcomes import AttackOutcome, privacy_score
from bench.core.params import Param, ParamSpace
from bench.core.result import RESULT_SCHEMA, Result
from bench.core.splits import DataShape, ImageSet, Splits
from bench.errors import BenchError
from bench.randomness.streams import Streams

__all__ = [
    "Attack",
    "AttackOutcome",
    "ImageSet",
    "Mechanism",
    "Param",
    "ParamSpace",
    "PrivacyClaim",
    "RESULT_SCHEMA",
    "Release",
    "Result",
    "RunContext",
    "Splits",
    "Streams",
    "Task",
    "privacy_score",
]


class Mechanism(abc.ABC):
    """An image privacy mechanism: uint8 images in, uint8 images out.

    Subclasses declare ``params`` and implement :meth:`apply`; the registry decorator sets
    ``name``. Bump ``version`` whenever outputs change, so cached releases are not reused.

    Args:
        **params: Parameter values (strings or Python objects), validated against ``params``.

    Raises:
        BenchError: An unknown parameter or an invalid value.
    """

    name: ClassVar[str] = ""
    version: ClassVar[int] = 1
    params: ClassVar[ParamSpace] = ParamSpace()
    uses_boxes: ClassVar[bool] = False
    description: ClassVar[str] = ""

    def __init__(self, **params: Any):
        self.config: dict[str, Any] = type(self).params.resolve(params, owner=f"mechanism {self.name!r}")

    def fit(self, public: ImageSet, ctx: "RunContext") -> None:
        """Fits the mechanism on public data (a generator, clip bounds); most need nothing."""

    @abc.abstractmethod
    def apply(
        self, images: torch.Tensor, *, generator: Streams, boxes: list[torch.Tensor] | None = None
    ) -> torch.Tensor:
        """Obfuscates a batch.

        Args:
            images: uint8 tensor [N, C, H, W]; never modified.
            generator: One random stream per image; image i draws only from stream i.
            boxes: Face boxes per image (float [k_i, 4], x1 y1 x2 y2) for mechanisms that
                use them.

        Returns:
            uint8 tensor [N, C, H, W] on the same device.
        """

    def claim(self) -> PrivacyClaim | None:
        """Returns the formal guarantee of this configuration, or None."""
        return None

    def check_inputs(self, images: torch.Tensor, generator: Streams) -> None:
        """Validates what :meth:`apply` receives; call it first in ``apply``.

        Raises:
            BenchError: Not a uint8 tensor [N, C, H, W], or not one stream per image.
        """
        check_batch(self.name, images, generator)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.config.items())
        return f"{type(self).__name__}({args})"


def check_batch(owner: str, images: torch.Tensor, generator: Streams) -> None:
    """Validates the arguments every mechanism's ``apply`` receives.

    Args:
        owner: The mechanism's name, for messages.
        images: The batch.
        generator: Its per-image streams.

    Raises:
        BenchError: Not a uint8 tensor [N, C, H, W], or not one stream per image.
    """
    if not isinstance(images, torch.Tensor) or images.dtype != torch.uint8 or images.dim() != 4:
        got = f"{images.dtype} tensor of shape {tuple(images.shape)}" if isinstance(images, torch.Tensor) else type(images).__name__
        raise BenchError(f"mechanism {owner!r} expects a uint8 tensor [N, C, H, W], got a {got}")
    if len(generator) != images.shape[0]:
        raise BenchError(
            f"mechanism {owner!r} got {len(generator)} random streams for {images.shape[0]} images; "
            "pass one stream per image"
        )


@dataclass
class Release:
    """The released (obfuscated) splits of one dataset under one mechanism configuration.

    Attributes:
        splits: Released splits (labels as in the clean splits, images obfuscated).
        mechanism: Registered mechanism name.
        params: Resolved mechanism parameters.
        seed: The run's seed.
        key: Content key of (dataset fingerprint, mechanism, version, params, seed).
        claim: The mechanism's formal guarantee, or None.
        metrics: Facts measured while releasing, e.g. ``detector_recall.test``.
        instance: The configured (and fitted) mechanism that made the release, for
            adversaries that know the mechanism and apply it to their own images.
        kernels: How its fused kernels ran: ``compiled`` or ``eager``.
    """

    splits: Splits
    mechanism: str
    params: dict[str, Any]
    seed: int
    key: str
    claim: PrivacyClaim | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    instance: Mechanism | None = field(default=None, repr=False, compare=False)
    kernels: str = "compiled"

    @property
    def is_clean(self) -> bool:
        """Whether the released images are the clean ones (the identity mechanism)."""
        return self.mechanism == "identity"


@dataclass
class RunContext:
    """Everything a task or attack needs from the run besides the data.

    Attributes:
        device: Where tensors and models live.
        seed: The run's base seed.
        profile: "smoke", "quick" or "paper".
        data_root: Root of real datasets, or None.
        cache_dir: Directory for releases and mechanism-independent models.
        options: Free-form overrides, e.g. ``{"face_reid.weights": "/path/to/weights.pt"}``.
        eval_split: Where utility and attacks are measured: ``test``, or ``val`` when
            tuning (selection must never look at test).
        benchmark: The benchmark (registered task name) the cell runs; adversaries read
            the attribute targets it declares. Empty: found from the dataset's name.
        task: The cell's configured task, for adversaries that attack what the task
            trained (``membership`` asks a :class:`TrainsClassifier` task for its models).
        log: Prints a progress line (quiet in CI).
        progress: Wraps an iterable in a progress bar: ``progress(iterable, total, desc)``.
        groups: Where the task puts its per-group table: ``groups["utility"] = (table,
            how it was measured)``, a table of :mod:`bench.core.groups`.
        tables: Tables the task reports beside its metrics (``per_class``: one dict per
            row); each becomes a CSV artifact of the cell's run.
    """

    device: torch.device
    seed: int
    profile: str
    data_root: Path | None
    cache_dir: Path
    options: Mapping[str, str] = field(default_factory=dict)
    eval_split: str = "test"
    benchmark: str = ""
    task: "Task | None" = None
    log: Callable[[str], None] = lambda msg: None
    progress: Callable[..., Any] = lambda it, total=None, desc=None: it
    groups: dict[str, Any] = field(default_factory=dict)
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


class _Configurable(abc.ABC):
    """A task or attack configured by a profile preset plus overrides.

    Subclasses name their config dataclass in ``config_class``; the constructor builds
    ``self.config`` from the profile's preset updated by the overrides (see
    :func:`bench.core.config.build_config`), so subclasses only add checks of their own.

    Args:
        profile: The preset's section (smoke, quick, paper).
        overrides: Setting -> value (``--set`` items of this section; dotted keys set
            entries of mapping or nested settings).

    Raises:
        BenchError: A missing preset or profile, an unknown setting or a bad value.
    """

    name: ClassVar[str] = ""
    role: ClassVar[str] = ""
    """``task`` or ``attack``: how messages name the owner of a setting."""
    metrics: ClassVar[dict[str, bool]] = {}
    primary: ClassVar[str] = ""
    description: ClassVar[str] = ""
    preset_package: ClassVar[str] = ""
    preset_name: ClassVar[str] = ""
    """Stem of the preset file (``<package>/presets/<stem>.yaml``); empty: the registered name."""
    config_class: ClassVar[type | None] = None
    """The config dataclass ``self.config`` is built as; None: the subclass builds its own."""
    version: ClassVar[int | tuple[int, ...]] = 1
    """Bump whenever the numbers it computes change (a model, a metric), or name the versions
    it builds on in a tuple: part of every cell and board key (:func:`bench.cell.protocol.code_versions`),
    so a result of older code is neither returned for nor ranked beside a new one."""
    def __init__(self, profile: str = "quick", overrides: Mapping[str, Any] | None = None):
        self.profile = profile
        self.overrides = dict(overrides or {})
        if self.config_class is not None:
            self.config: Any = build_config(self.config_class, self.settings(), self.owner)

    @property
    def owner(self) -> str:
        """Who owns the settings, for messages: ``task 'fewshot_celeba'``."""
        return f"{self.role} {self.name!r}"

    def settings(self) -> dict[str, Any]:
        """Returns the profile's preset (``<package>/presets/<preset>.yaml``) updated by the overrides.

        Raises:
            BenchError: The preset file is missing or has no such profile.
        """
        values = load_preset(self.preset_package, self.preset_name or self.name, self.profile, self.owner)
        values.update(self.overrides)
        return values


class Task(_Configurable):
    """A utility task on one dataset.

    Class attributes:
        dataset: Registered dataset name.
        metrics: Metric name -> whether higher is better.
        primary: The metric on the utility axis of frontiers.
        attacks: Adversaries run against this task's releases by default.
    """

    dataset: ClassVar[str] = ""
    attacks: ClassVar[tuple[str, ...]] = ()
    role: ClassVar[str] = "task"
    preset_package: ClassVar[str] = "tasks"
    benchmark: ClassVar[Any] = None
    """The :class:`bench.core.benchmarks.Benchmark` declaration this task class was made for, or None."""
    validation: ClassVar[bool] = False
    """Whether the task can measure on a validation split (``RunContext.eval_split == "val"``),
    as tuning requires; a task without one refuses tuning rather than select on test."""
    provides: ClassVar[tuple[str, ...]] = ()
    """What adversaries can ask of it besides the data (``trained_classifier``: its models)."""
    tunable: ClassVar[ParamSpace] = ParamSpace()
    """Task settings ``bench tune`` may search besides the mechanism's parameters (dotted
    names such as ``training.epsilon``); a setting given with ``--set`` is held fixed."""
    entry_settings: ClassVar[tuple[str, ...]] = ()
    """Settings (dotted prefixes) that define a board *entry* rather than the board: a
    training method (``training``) makes ``identity + DP-SGD(flat, ε=3)`` and
    ``identity + DP-SGD(per_layer, ε=3)`` two rows of one board."""
    precisions: ClassVar[tuple[str, ...]] = ("fp32",)
    """The precisions its networks can train and run at (:mod:`bench.system.precision`): add ``bf16``
    once each of them runs under :func:`bench.system.precision.autocast` with float32 outputs."""

    def settings(self) -> dict[str, Any]:
        """Returns the preset updated by the benchmark's fixed settings, then by the overrides.

        Raises:
            BenchError: An override changes a setting the benchmark fixes (its protocol).
        """
        fixed = dict(getattr(self.benchmark, "task_settings", None) or {})
        for key, value in self.overrides.items():
            if key.split(".")[0] in fixed and value != fixed[key.split(".")[0]]:
                raise BenchError(f"{self.owner}: setting {key!r} is fixed to {fixed[key.split('.')[0]]!r} by the "
                                 "benchmark (each value is its own benchmark; see 'bench list benchmarks')")
        values = load_preset(self.preset_package, self.preset_name or self.name, self.profile, self.owner)
        values.update(fixed)
        values.update(self.overrides)
        return values

    def entry_label(self) -> str:
        """Returns what its :attr:`entry_settings` name, for entry names (``DP-SGD(flat, ε=3)``); empty: none."""
        return ""

    def check_other_data(self, root: Path | None, eval_split: str = "test") -> None:
        """Checks, cheaply and before any work, data the task reads besides its dataset (a transfer target).

        Raises:
            BenchError: That data is missing; the message names its layout.
        """

    def other_datasets(self) -> tuple[str, ...]:
        """Returns the registered datasets the task reads besides its own (a transfer target).

        ``bench grid`` hands a finished cell whose data is real, its own or one of these, to
        a worker that checks the data against the result before skipping it.
        """
        return ()

    def training_claim(self, clean: Splits) -> PrivacyClaim | None:
        """Returns the guarantee of the task's own training for its training records, or None.

        It is a second claim beside the mechanism's, in other units (a training record,
        not an image of a release); the two are reported side by side, never merged.
        """
        return None

    @abc.abstractmethod
    def data_options(self) -> dict[str, Any]:
        """Returns the loader options of this task's profile (sizes, split sizes)."""

    def input_size(self) -> tuple[int, int] | None:
        """Returns the (height, width) its networks see released images at, or None for as stored."""
        return None

    @abc.abstractmethod
    def evaluate(self, clean: Splits, released: Release, ctx: RunContext) -> dict[str, float]:
        """Measures utility on the release; returns metric name -> value (primary included)."""

    def config_dict(self) -> dict[str, Any]:
        """Returns the resolved configuration (logged with every run)."""
        return {}

    def check_data(self, shape: DataShape | None, eval_split: str = "test") -> None:
        """Checks settings against the data before any work (episode sizes against images per class).

        Args:
            shape: Split -> images per class, from :meth:`Dataset.inspect`; None when the
                dataset cannot tell cheaply.
            eval_split: The split the cell measures on.

        Raises:
            BenchError: A setting the data cannot serve; the message names the setting.
        """


class Attack(_Configurable):
    """An adversary: sees the clean data its threat model allows and the release."""

    role: ClassVar[str] = "attack"
    preset_package: ClassVar[str] = "attacks"
    requires: ClassVar[str] = ""
    """What the task must provide besides the data (see :attr:`Task.provides`); empty: nothing."""
    validation: ClassVar[bool] = False
    """Whether the attack can target the validation split (``RunContext.eval_split == "val"``)."""

    @abc.abstractmethod
    def run(self, clean: Splits, released: Release, ctx: RunContext) -> AttackOutcome:
        """Attacks the release and returns its outcome."""

    def config_dict(self) -> dict[str, Any]:
        """Returns the resolved configuration (logged with every run)."""
        return {}

    def check_data(self, shape: DataShape | None, eval_split: str = "test") -> None:
        """Checks settings against the data before any work (enrolment against images per identity).

        Raises:
            BenchError: A setting the data cannot serve; the message names the setting.
        """
