"""What a dp_vit run trains and what it may claim, fixed before any training.

:class:`TrainingMethod` (clipping, target (ε, δ), fusion, model selection) and
:class:`Schedule` (epochs, batch size, optimiser) give a :class:`Plan` for N records:
Poisson sampling at q = 1/k with k = ceil(n/B) steps per epoch (n: records per model, N/2
for disjoint fusion), Opacus's convention, so q = B/n when B divides n; and σ from the
accountant. Nothing here touches torch.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass

from bench.core.config import setting
from bench.errors import BenchError
from bench.privacy.dpsgd import accounting

CLIPPINGS = ("flat", "per_layer", "per_layer_median")
ACCOUNTANTS = ("prv", "rdp")
FUSION_DATA = ("disjoint", "shared")
SELECTIONS = ("fixed", "private_val")
OPTIMIZERS = ("adam", "sgd")


@dataclass(frozen=True)
class TrainingMethod:
    """How a model is trained with DP-SGD (``task.training.*``).

    Attributes:
        clipping: ``flat`` (one bound C on the whole per-sample gradient), ``per_layer``
            (C split equally over the L parameter tensors, C/sqrt(L) each, so the total
            sensitivity is still C) or ``per_layer_median`` (the paper's Eqs. 9-13: the
            threshold is the median of the sample's own layer norms; its ε is not backed).
        epsilon: Target ε per training record; ``math.inf`` trains without clipping or noise.
        delta: Target δ; 0 means 1/(10 N). Must be below 1/N.
        max_grad_norm: The clipping bound C (``flat`` and ``per_layer``).
        alpha: Eq. 12's boundary added to the median threshold (``per_layer_median``).
        accountant: ``prv`` or ``rdp``: the accountant that sets the noise multiplier; the
            other one cross-checks.
        fusion: Train two models and fuse their predictions (Eqs. 14-17).
        fusion_data: ``disjoint`` (each model on its own half: parallel composition) or
            ``shared`` (both on all data: the noise is set for the composition of both runs).
        selection: ``fixed`` (the last epoch) or ``private_val`` (report-noisy-max over the
            epochs' validation accuracies, charged to the budget).
        selection_epsilon: The ε that ``private_val`` spends; DP-SGD runs at
            ``epsilon - selection_epsilon`` (basic composition).
    """

    clipping: str = setting("flat", choices=CLIPPINGS)
    epsilon: float = setting(3.0, low=0.0, low_open=True, infinite=True)
    delta: float = setting(0.0, low=0.0, high=1.0)
    max_grad_norm: float = setting(1.0, low=0.0, low_open=True)
    alpha: float = setting(0.01, low=0.0, low_open=True)
    accountant: str = setting("prv", choices=ACCOUNTANTS)
    fusion: bool = False
    fusion_data: str = setting("disjoint", choices=FUSION_DATA)
    selection: str = setting("fixed", choices=SELECTIONS)
    selection_epsilon: float = setting(0.1, low=0.0, low_open=True)

    @property
    def private(self) -> bool:
        """Whether the method is DP-SGD (a finite ε) rather than ordinary training."""
        return math.isfinite(self.epsilon)

    @property
    def backed(self) -> bool:
        """Whether the accountant's ε is a guarantee (False for the data-dependent median threshold)."""
        return self.clipping != "per_layer_median"

    @property
    def dp_epsilon(self) -> float:
        """The ε left to DP-SGD after private model selection takes its share."""
        if self.private and self.selection == "private_val":
            return self.epsilon - self.selection_epsilon
        return self.epsilon

    def resolved_delta(self, n_train: int) -> float:
        """Returns δ, with 0 read as 1/(10 N).

        Args:
            n_train: Number of training records N.
        """
        return self.delta if self.delta > 0 else 1.0 / (10 * n_train)

    def non_private(self) -> TrainingMethod:
        """Returns this method with ε = inf: the same schedule without clipping or noise."""
        return dataclasses.replace(self, epsilon=math.inf)

    def validate(self, n_train: int) -> None:
        """Checks every setting against the training set's size.

        Args:
            n_train: Number of training records N.

        Raises:
            BenchError: An unknown name, a value out of range, δ not below 1/N, or a
                selection ε that leaves nothing to DP-SGD (the message names the setting).
        """
        _choice("clipping", self.clipping, CLIPPINGS)
        _choice("accountant", self.accountant, ACCOUNTANTS)
        _choice("fusion_data", self.fusion_data, FUSION_DATA)
        _choice("selection", self.selection, SELECTIONS)
        if not isinstance(self.fusion, bool):
            raise BenchError(f"task.training.fusion must be true or false, got {self.fusion!r}")
        if isinstance(n_train, bool) or not isinstance(n_train, numbers.Integral) or n_train < 1:
            raise BenchError(f"the training set must hold at least one record, got {n_train!r}")
        if self.fusion and self.fusion_data == "disjoint" and n_train < 2:
            raise BenchError("task.training.fusion_data=disjoint needs at least two training records")
        if math.isnan(self.epsilon) or self.epsilon <= 0:
            raise BenchError(f"task.training.epsilon must be > 0 (inf: non-private), got {self.epsilon!r}")
        _positive("max_grad_norm", self.max_grad_norm)
        _positive("alpha", self.alpha)
        _positive("selection_epsilon", self.selection_epsilon)
        if not (math.isfinite(self.delta) and 0 <= self.delta < 1):
            raise BenchError(f"task.training.delta must be in [0, 1) (0: 1/(10N)), got {self.delta!r}")
        if self.delta >= 1.0 / n_train:
            raise BenchError(f"task.training.delta={self.delta:g} must be below 1/N = {1.0 / n_train:.3g} "
                             f"(N = {n_train} training records), or 0 for 1/(10N)")
        if self.private and self.selection == "private_val" and self.selection_epsilon >= self.epsilon:
            raise BenchError(f"task.training.selection_epsilon={self.selection_epsilon:g} must be below "
                             f"task.training.epsilon={self.epsilon:g}: DP-SGD runs at the difference")

    def label(self) -> str:
        """Returns the board label, e.g. ``DP-SGD(flat, ε=3)`` or ``non-private+fusion(disjoint)``."""
        if not self.private:
            text = "non-private"
        else:
            text = f"DP-SGD({self.clipping}, ε={self.epsilon:g}{'' if self.backed else ', unbacked'})"
        return text + (f"+fusion({self.fusion_data})" if self.fusion else "")


def _choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise BenchError(f"task.training.{name} must be one of {', '.join(choices)}, got {value!r}")


def _positive(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise BenchError(f"task.training.{name} must be a finite number > 0, got {value!r}")


@dataclass(frozen=True)
class Schedule:
    """Epochs, expected batch size and optimiser of a training run (``task.schedule.*``).

    Attributes:
        epochs: Passes over the data (k = ceil(n / batch_size) steps each).
        batch_size: Expected batch size B (Poisson batches vary around it).
        lr: Learning rate.
        optimizer: ``adam`` or ``sgd``.
        momentum: SGD momentum.
        weight_decay: L2 weight decay (applied by the optimiser after the noise).
    """

    epochs: int = setting(low=1)
    batch_size: int = setting(low=1)
    lr: float = setting(low=0.0, low_open=True)
    optimizer: str = setting("adam", choices=OPTIMIZERS)
    momentum: float = setting(0.9, low=0.0, high=1.0)
    weight_decay: float = setting(0.0, low=0.0)

    def validate(self) -> None:
        """Raises BenchError naming the first setting out of range."""
        for name, value in (("epochs", self.epochs), ("batch_size", self.batch_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise BenchError(f"task.schedule.{name} must be a positive integer, got {value!r}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise BenchError(f"task.schedule.lr must be finite and > 0, got {self.lr!r}")
        if self.optimizer not in OPTIMIZERS:
            raise BenchError(f"task.schedule.optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")
        if not 0 <= self.momentum <= 1:
            raise BenchError(f"task.schedule.momentum must be in [0, 1], got {self.momentum!r}")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise BenchError(f"task.schedule.weight_decay must be finite and >= 0, got {self.weight_decay!r}")


@dataclass(frozen=True)
class Plan:
    """What every model of a run does, fixed before training.

    Attributes:
        models: 1, or 2 with fusion.
        records: Records per model the schedule is planned for (N, or N/2 when disjoint).
        steps_per_epoch: k = ceil(records / B).
        sample_rate: q = 1/k.
        steps: Steps per model (epochs · k).
        expected_batch_size: Denominator of the mean gradient, int(records · q).
        noise_multiplier: σ (0 when non-private).
        delta: δ of the claim.
        history: What the accountant covers for the whole run (both models composed when shared).
    """

    models: int
    records: float
    steps_per_epoch: int
    sample_rate: float
    steps: int
    expected_batch_size: int
    noise_multiplier: float
    delta: float
    history: tuple[tuple[float, float, int], ...]


def plan_training(method: TrainingMethod, schedule: Schedule, n_train: int) -> Plan:
    """Returns the plan of a run; for a private one, σ meets ``method.dp_epsilon`` with the chosen accountant.

    Raises:
        BenchError: Invalid method or schedule, or a budget no σ meets.
    """
    method.validate(n_train)
    schedule.validate()
    models = 2 if method.fusion else 1
    records = n_train / 2 if method.fusion and method.fusion_data == "disjoint" else float(n_train)
    k = math.ceil(records / schedule.batch_size)
    q, steps, delta = 1.0 / k, schedule.epochs * k, method.resolved_delta(n_train)
    covered = accounting.fusion_steps(steps, method.fusion_data) if method.fusion else steps
    sigma = 0.0
    if method.private:
        sigma = accounting.noise_multiplier(method.dp_epsilon, delta, q, covered, method.accountant)
    history = ((sigma, q, covered),) if method.private else ()
    return Plan(models, records, k, q, steps, max(1, int(records * q)), sigma, delta, history)


def accounting_facts(method: TrainingMethod, schedule: Schedule, n_train: int) -> dict[str, float | str]:
    """Returns the run's privacy claim without training: what ``train_private`` reports.

    Raises:
        BenchError: Invalid method or schedule, or a budget no σ meets.
    """
    return plan_facts(method, plan_training(method, schedule, n_train))


def plan_facts(method: TrainingMethod, plan: Plan) -> dict[str, float | str]:
    """Returns the privacy claim of a planned run.

    Keys: ``epsilon`` (what holds: the accountant's ε of the plan's history plus the
    selection ε; nominal when ``backed`` is "no"), ``epsilon_check`` (the other
    accountant, same history), ``delta``, ``noise_multiplier``, ``sample_rate``, ``steps``
    (per model), ``accountant``, ``backed`` ("yes"/"no"), ``note`` (how ε was composed).

    Args:
        method: The training method.
        plan: Its plan (:func:`plan_training`).
    """
    facts: dict[str, float | str] = {"delta": plan.delta, "noise_multiplier": plan.noise_multiplier,
                                     "sample_rate": plan.sample_rate, "steps": plan.steps,
                                     "accountant": method.accountant, "backed": "yes" if method.backed else "no"}
    if not method.private:
        return {**facts, "epsilon": math.inf, "epsilon_check": math.inf, "backed": "no", "note": "non-private"}
    extra = method.selection_epsilon if method.selection == "private_val" else 0.0
    notes = []
    if method.fusion:
        notes.append("two models on disjoint halves (parallel composition)" if method.fusion_data == "disjoint"
                     else "two models on all records (both runs composed)")
    if extra:
        notes.append(f"includes {extra:g} for report-noisy-max model selection on validation accuracy")
    if not method.backed:
        notes.append("nominal: the per-layer median threshold is computed from private gradients, so no ε is backed")
    check = accounting.other_accountant(method.accountant)
    return {**facts, "epsilon": accounting.history_epsilon(plan.history, plan.delta, method.accountant) + extra,
            "epsilon_check": accounting.history_epsilon(plan.history, plan.delta, check) + extra,
            "note": "; ".join(notes)}
