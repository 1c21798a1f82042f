"""Training a classifier with DP-SGD (Opacus) or without privacy, and predicting with it.

Every run follows the :class:`~bench.privacy.dpsgd.method.Plan` of its method, schedule and N,
so the privacy claim is known before training (:func:`accounting_facts`) and the
accountants' records are checked against it afterwards. Noise comes from Opacus's
ordinary generator, seeded (``secure_mode`` off: not hardened against floating-point
attacks on the Gaussian sampler).
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from bench.errors import BenchError
from bench.privacy.dpsgd import accounting
from bench.privacy.dpsgd.canaries import GradientCanaries
from bench.privacy.dpsgd.fusion import fuse
from bench.privacy.dpsgd.method import Plan, Schedule, TrainingMethod, accounting_facts, plan_facts, plan_training
from bench.randomness.seeding import derive_seed, make_generator

__all__ = ["Schedule", "Trained", "accounting_facts", "per_example_loss", "predict_proba", "train_private"]


@dataclass
class Trained:
    """The outcome of :func:`train_private`.

    Attributes:
        models: The trained models (eval mode, on the training device): 1, or 2 when fused.
        report: Training facts: those of :func:`accounting_facts` plus ``selected_epoch``,
            ``loss_epoch_<k>`` (mean training loss of epoch k, 1-based, averaged over models),
            ``label`` and, for ``per_layer_median``, ``noise_scale_mean`` (the mean over steps of
            max_u Z̄_u; the noise std is σ times it).
    """

    models: list[nn.Module]
    report: dict[str, float | str]


def train_private(build: Callable[[], nn.Module], images: torch.Tensor, labels: torch.Tensor,
                  method: TrainingMethod, schedule: Schedule, seed: int, device: str | torch.device,
                  val: tuple[torch.Tensor, torch.Tensor] | None = None,
                  progress: Callable = lambda it, total=None, desc=None: it,
                  canaries: GradientCanaries | None = None) -> Trained:
    """Trains one model (two when fused) by ``method`` and reports what the training spent.

    Private methods use Opacus with Poisson sampling: ``flat`` and ``per_layer`` through
    ``PrivacyEngine.make_private``, ``per_layer_median`` through ``GradSampleModule`` and
    :class:`~bench.privacy.dpsgd.median.MedianPerLayerOptimizer`. ε = inf trains the same model and
    schedule with shuffled mini-batches. Initialisation, partition, sampling, noise and
    selection noise come from generators derived from ``seed``.

    Args:
        build: Returns a fresh model taking uint8 images (called once per model).
        images: Training images, uint8 [N, C, H, W], on the CPU.
        labels: Class labels, int64 [N].
        method: The training method.
        schedule: Epochs, batch size and optimiser.
        seed: The run's seed.
        device: Where to train.
        val: Validation (images, labels), required by ``selection="private_val"``.
        progress: Wraps an iterable to show progress (``tqdm``-like).
        canaries: Gradient canaries of a one-run audit, added to the first model's training and
            scored from its per-step noisy gradients (:mod:`bench.privacy.dpsgd.canaries`).

    Raises:
        BenchError: Invalid settings, mismatched inputs, a missing validation set, or an
            empty half for disjoint fusion.
    """
    n = len(images)
    if images.dtype != torch.uint8 or images.dim() != 4 or labels.shape != (n,):
        raise BenchError(f"training needs uint8 images [N, C, H, W] and labels [N], got {tuple(images.shape)} "
                         f"{images.dtype} and {tuple(labels.shape)}")
    plan = plan_training(method, schedule, n)
    device = torch.device(device)
    selector = _Selector(method, val, seed)
    runs = [_Run(build, images[idx], labels[idx].long(), method, schedule, plan, seed, k, device,
                 canaries if k == 0 else None)
            for k, idx in enumerate(_partition(n, method, seed))]
    report: dict[str, float | str] = {**plan_facts(method, plan), "label": method.label()}
    for epoch in progress(range(1, schedule.epochs + 1), total=schedule.epochs, desc="dp_vit training"):
        report[f"loss_epoch_{epoch}"] = sum(run.epoch() for run in runs) / len(runs)
        selector.offer(epoch, [run.model for run in runs])
    report["selected_epoch"] = selector.choose([run.model for run in runs], schedule.epochs)
    if not method.private:  # shuffled batches of a coin-flip half may number one more or less than planned
        report["steps"] = max(run.steps for run in runs)
    for run in runs:
        if method.private and run.history() != [(plan.noise_multiplier, plan.sample_rate, plan.steps)]:
            raise RuntimeError(f"the accountant recorded {run.history()}, the plan was "
                               f"{(plan.noise_multiplier, plan.sample_rate, plan.steps)}")
    scales = [s for run in runs for s in run.noise_scales()]
    if scales:
        report["noise_scale_mean"] = sum(scales) / len(scales)
    return Trained([run.finish() for run in runs], report)


def predict_proba(models: list[nn.Module], images: torch.Tensor, batch: int = 512,
                  device: str | torch.device | None = None) -> torch.Tensor:
    """Returns class probabilities [N, classes] on the CPU, fused by Eqs. 14-17 when two models.

    Args:
        models: One or two trained models taking uint8 images.
        images: uint8 images [N, C, H, W].
        batch: Images per forward pass.
        device: Where to run (default: the first model's parameters' device).
    """
    outs = [_probs(logits) for logits in _logits(models, images, batch, device)]
    return torch.cat(outs) if outs else torch.zeros(0, 0)


def per_example_loss(models: list[nn.Module], images: torch.Tensor, labels: torch.Tensor, batch: int = 512,
                     device: str | torch.device | None = None) -> torch.Tensor:
    """Returns each example's cross-entropy [N] on the CPU (of the fused prediction when two models).

    Args:
        models: One or two trained models taking uint8 images.
        images: uint8 images [N, C, H, W].
        labels: Class labels [N].
        batch: Images per forward pass.
        device: Where to run (default: the first model's parameters' device).
    """
    labels, outs, start = labels.long().cpu(), [], 0
    for logits in _logits(models, images, batch, device):
        y = labels[start:start + len(logits[0])]
        start += len(y)
        if len(logits) == 1:  # from the logits: exact where a softmax probability would underflow
            outs.append(F.cross_entropy(logits[0], y, reduction="none"))
        else:
            picked = _probs(logits).gather(1, y[:, None])[:, 0]
            outs.append(-picked.clamp_min(torch.finfo(picked.dtype).tiny).log())
    return torch.cat(outs) if outs else torch.zeros(0)


def _logits(models: list[nn.Module], images: torch.Tensor, batch: int,
            device: str | torch.device | None) -> list[list[torch.Tensor]]:
    """Each batch's float logits (on the CPU), one tensor per model, computed in eval mode."""
    if len(models) not in (1, 2):
        raise ValueError(f"one or two models, got {len(models)}")
    device = torch.device(device) if device is not None else next(models[0].parameters()).device
    states = [m.training for m in models]
    out = []
    try:
        with torch.inference_mode():
            for m in models:
                m.eval()
            for start in range(0, len(images), batch):
                x = images[start:start + batch].to(device)
                out.append([m(x).float().cpu() for m in models])
    finally:
        for m, was in zip(models, states):
            m.train(was)
    return out


def _probs(logits: list[torch.Tensor]) -> torch.Tensor:
    """Softmax of one model's logits, or the fusion (Eqs. 14-17) of two models' softmaxes."""
    probs = [F.softmax(z, dim=1) for z in logits]
    return probs[0] if len(probs) == 1 else fuse(*probs)


def _partition(n: int, method: TrainingMethod, seed: int) -> list[torch.Tensor]:
    """Index sets of the models: all records, twice when shared, or halves by a fair coin per record.

    Independent coins (rather than a balanced split) keep parallel composition exact under
    add/remove neighbours: the other records' halves do not depend on the one that differs.
    """
    everything = torch.arange(n)
    if not method.fusion:
        return [everything]
    if method.fusion_data == "shared":
        return [everything, everything]
    coins = torch.rand(n, generator=make_generator(seed, "dp_vit", "partition")) < 0.5
    halves = [everything[~coins], everything[coins]]
    if min(len(h) for h in halves) == 0:
        raise BenchError(f"task.training.fusion_data=disjoint left one model without records (N = {n})")
    return halves


class _Run:
    """One model in training: its module, optimiser, loader and (private) accountant."""

    def __init__(self, build: Callable[[], nn.Module], images: torch.Tensor, labels: torch.Tensor,
                 method: TrainingMethod, schedule: Schedule, plan: Plan, seed: int, index: int, device: torch.device,
                 canaries: GradientCanaries | None = None):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(seed, "dp_vit", "init", index))
            model = build()
        self.device, self.steps, self.rows_checked = device, 0, False
        model = model.to(device).train()
        params = [p for p in model.parameters() if p.requires_grad]
        if schedule.optimizer == "adam":
            opt = torch.optim.Adam(params, lr=schedule.lr, weight_decay=schedule.weight_decay)
        else:
            opt = torch.optim.SGD(params, lr=schedule.lr, momentum=schedule.momentum,
                                  weight_decay=schedule.weight_decay)
        data = TensorDataset(images, labels)
        sampling = make_generator(seed, "dp_vit", "sampling", index)
        self.accountant, self.canaries = None, canaries
        if canaries is not None and method.private:
            data = _with_canary_records(images, labels, canaries)
        if not method.private:
            self.model, self.opt = model, opt
            self.loader = DataLoader(data, batch_size=schedule.batch_size, shuffle=True, generator=sampling)
            if canaries is not None:
                canaries.bind(params, method.max_grad_norm, method.max_grad_norm)
            return
        from opacus import GradSampleModule, PrivacyEngine
        from opacus.accountants import create_accountant
        from opacus.data_loader import DPDataLoader

        from bench.privacy.dpsgd.median import MedianPerLayerOptimizer

        loader = DPDataLoader(data, sample_rate=plan.sample_rate, generator=sampling)
        loader.batch_sampler.steps = plan.steps_per_epoch  # Opacus's int(1 / q) can round 1/(1/93) down to 92
        noise = make_generator(seed, "dp_vit", "noise", index, device=device)
        sigma, bound = plan.noise_multiplier, method.max_grad_norm
        if method.clipping == "per_layer_median" and canaries is not None:
            raise BenchError("gradient canaries cannot audit per_layer_median clipping (its noise scale depends "
                             "on the data); audit it with input canaries (membership.canary_kind=input)")
        if method.clipping == "per_layer_median":
            model = GradSampleModule(model, loss_reduction="mean")
            opt = MedianPerLayerOptimizer(opt, noise_multiplier=sigma, alpha=method.alpha,
                                          expected_batch_size=plan.expected_batch_size, generator=noise)
            self.accountant = create_accountant(method.accountant)
            opt.attach_step_hook(self.accountant.get_optimizer_hook_fn(sample_rate=plan.sample_rate))
        else:
            norms = bound if method.clipping == "flat" else [bound / math.sqrt(len(params))] * len(params)
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Secure RNG turned off")
                engine = PrivacyEngine(accountant=method.accountant)
                # poisson_sampling=False: the loader above already samples Poisson at the plan's q.
                model, opt, loader = engine.make_private(module=model, optimizer=opt, data_loader=loader,
                                                         noise_multiplier=sigma, max_grad_norm=norms,
                                                         poisson_sampling=False, clipping=method.clipping,
                                                         noise_generator=noise)
            opt.expected_batch_size = plan.expected_batch_size
            self.accountant = engine.accountant
            if canaries is not None:
                self.bounds = [float(b) for b in (norms if isinstance(norms, list) else [norms] * len(params))]
                self.flat_clipping = method.clipping == "flat"
                _attach(canaries, opt, plan, bound, self.bounds, len(data))
        self.model, self.opt, self.loader = model, opt, loader

    def epoch(self) -> float:
        """Runs one epoch; returns the mean training loss over the examples seen."""
        self.model.train()
        total, count = torch.zeros((), device=self.device), 0
        params = [p for p in self.model.parameters() if p.requires_grad]
        mean_canaries = self.canaries if self.accountant is None else None
        at = mean_canaries.epoch_schedule(len(self.loader)) if mean_canaries is not None else None
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            for step, (x, y, *slot) in enumerate(self.loader):
                self.opt.zero_grad(set_to_none=True)
                if len(x) == 0:  # an empty Poisson batch is still a step: noise only
                    for p in params:
                        p.grad_sample = torch.zeros((0, *p.shape), dtype=p.dtype, device=p.device)
                else:
                    x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
                    loss, seen = _batch_loss(self.model(x), y, slot[0].to(self.device) if slot else None)
                    loss.backward()
                if slot and self.accountant is not None:
                    if len(x) and not self.rows_checked:
                        self.rows_checked = True
                        self.canaries.check_rows(self.model, x, y, slot[0], list(self.opt.params))
                    self.canaries.fill_rows(list(self.opt.params), slot[0], self.bounds, self.flat_clipping)
                if len(x) == 0:
                    self.opt.step()
                    self.steps += 1
                    continue
                if mean_canaries is not None:
                    mean_canaries.add_to_mean(params, len(x), at, step)
                    mean_canaries.observe_mean(params, len(x))
                self.opt.step()
                self.steps += 1
                total += loss.detach() * len(x)
                count += seen
        self.opt.zero_grad(set_to_none=True)
        return float(total) / max(count, 1)

    def history(self) -> list[tuple[float, float, int]]:
        """The (σ, q, steps) triples the accountant recorded (empty when non-private)."""
        return [] if self.accountant is None else [tuple(h) for h in self.accountant.history]

    def noise_scales(self) -> list[float]:
        """The per-step noise scales Z̄ of the median optimizer (empty otherwise)."""
        return list(getattr(self.opt, "sensitivities", []))

    def finish(self) -> nn.Module:
        """Returns the plain trained module (Opacus hooks and attributes removed), in eval mode."""
        model = self.model
        if hasattr(model, "to_standard_module"):
            model = model.to_standard_module()
        for p in model.parameters():
            if hasattr(p, "summed_grad"):
                del p.summed_grad
            p.grad = None
        return model.eval()


def _batch_loss(logits: torch.Tensor, y: torch.Tensor, slots: torch.Tensor | None) -> tuple[torch.Tensor, int]:
    """The batch's mean cross-entropy and its number of training records.

    With canary records (``slots`` >= 0) their rows count in the mean's denominator, as the
    per-sample machinery sees the whole batch, but their loss is left out.
    """
    if slots is None:
        return F.cross_entropy(logits, y), len(y)
    real = slots < 0
    return (F.cross_entropy(logits, y, reduction="none") * real).sum() / len(y), int(real.sum())


def _with_canary_records(images: torch.Tensor, labels: torch.Tensor, canaries: GradientCanaries) -> TensorDataset:
    """The training records followed by one record per included canary, each row tagged by its canary (-1: none).

    A canary record's image is blank and its loss is left out: the auditor fills its
    per-sample gradient row (:meth:`GradientCanaries.fill_rows`). It is sampled by the
    training's own loader, as any record is.
    """
    ids = canaries.ids
    blank = torch.zeros((len(ids), *images.shape[1:]), dtype=images.dtype)
    return TensorDataset(torch.cat([images, blank]), torch.cat([labels, torch.zeros(len(ids), dtype=labels.dtype)]),
                         torch.cat([torch.full((len(images),), -1, dtype=torch.long), ids]))


def _attach(canaries: GradientCanaries, opt: torch.optim.Optimizer, plan: Plan, bound: float, bounds: list[float],
            records: int) -> None:
    """Binds the canaries to the DP optimiser's parameters and scores every step after its noise.

    The scores and the measured mechanism take the plan's noise (σ times the bound C) as the
    reference: the audit tests what the claim says, whatever the optimiser does.
    """
    params = list(opt.params)
    canaries.bind(params, bounds, float(bound))
    canaries.start_private(float(plan.noise_multiplier * bound), float(plan.noise_multiplier), plan.sample_rate,
                           records)
    add_noise = opt.add_noise

    def noisy_step() -> None:
        add_noise()
        canaries.observe_noisy(params)

    opt.add_noise = noisy_step


class _Selector:
    """Model selection: the last epoch, or report-noisy-max on validation accuracy."""

    def __init__(self, method: TrainingMethod, val: tuple[torch.Tensor, torch.Tensor] | None, seed: int):
        self.active = method.selection == "private_val"
        if self.active and (val is None or len(val[0]) == 0 or len(val[0]) != len(val[1])):
            raise BenchError("task.training.selection=private_val needs validation images with one label each")
        self.val = val
        self.scale = 0.0  # non-private selection: the plain argmax
        if self.active and method.private:
            self.scale = accounting.noisy_max_scale(len(val[0]), method.selection_epsilon)
        self.noise = make_generator(seed, "dp_vit", "selection")
        self.best: tuple[float, int, list[dict[str, torch.Tensor]]] | None = None

    def offer(self, epoch: int, models: list[nn.Module]) -> None:
        """Scores the models after ``epoch`` (noisy validation accuracy) and keeps the best so far."""
        if not self.active:
            return
        images, labels = self.val
        accuracy = (predict_proba(models, images).argmax(1) == labels.cpu()).double().mean().item()
        exponentials = torch.empty(2, dtype=torch.float64).exponential_(generator=self.noise)
        score = accuracy + self.scale * float(exponentials[0] - exponentials[1])  # Laplace(scale)
        if self.best is None or score > self.best[0]:
            self.best = (score, epoch, [copy.deepcopy(_plain(m).state_dict()) for m in models])

    def choose(self, models: list[nn.Module], last: int) -> int:
        """Loads the chosen epoch's weights into ``models``; returns that epoch (1-based)."""
        if self.best is None:
            return last
        for m, state in zip(models, self.best[2]):
            _plain(m).load_state_dict(state)
        return self.best[1]


def _plain(model: nn.Module) -> nn.Module:
    """The module inside an Opacus GradSampleModule (the model itself otherwise)."""
    return getattr(model, "_module", model)
