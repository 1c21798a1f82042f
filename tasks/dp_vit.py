"""DP-ViT: a vision transformer trained with DP-SGD on the released training images.

The DP vision transformer paper (``../shared/papers/dp-vit-image-recognition.txt``) trains a
ViT with DP-SGD: flat clipping, its per-layer median clipping (Eqs. 9-13) and an adaptive
weighted fusion of two DP models (Eqs. 14-17). The training method is a setting group
(``task.training.*``, :class:`bench.privacy.dpsgd.method.TrainingMethod`) that names the *entry*,
not the board: ``identity + DP-SGD(flat, ε=3)`` and ``identity + DP-SGD(per_layer, ε=3)``
are two rows of one board.

A cell carries two claims side by side, never merged: the mechanism's (about images of the
release) and the training's, about one *training record* (one image; a person with many
images is covered only by group privacy). ``per_layer_median`` computes its threshold from
private gradients, so its ε is nominal and shown as unbacked.

The release keeps the stored images' size (a folder of your own is stored at its own size);
every model sees them resized once to its square input, ``task.model.image_size``
(:func:`bench.nn.vit.vit_inputs`; unset: the loader's ``size``, 32 for synthetic objects and
CIFAR-10): the target, the non-private reference, and the adversary's reference and canary
models alike (:meth:`DpVit.model_inputs`).

Models (the target, the non-private reference on clean images, the adversary's reference
models) are cached by their data, method, schedule and seed, so every mechanism shares the
non-private one and every cell of one training configuration shares its reference models.
Model selection never looks at test: the last epoch (``selection: fixed``) or a private
report-noisy-max on validation accuracy charged to the budget (``private_val``).
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import asdict, dataclass, replace
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from bench.core.interfaces import PrivacyClaim, Release, RunContext, Task
from bench.core.keys import content_key
from bench.core.params import Param, ParamSpace
from bench.data.base import DataShape, ImageSet, Splits
from bench.errors import BenchError
from bench.nn.vit import build_vit, vit_inputs
from bench.privacy.dpsgd.accounting import CrossCheck
from bench.privacy.dpsgd.canaries import GradientCanaries
from bench.privacy.dpsgd.canary_scores import CanaryGeometry
from bench.privacy.dpsgd.method import TrainingMethod, accounting_facts
from bench.privacy.dpsgd.train import per_example_loss, predict_proba, train_private
from bench.randomness.seeding import derive_seed
from bench.storage.cache import Cache
from bench.storage.modelcache import cached_model
from tasks.class_metrics import class_count, topk_accuracy
from tasks.dp_vit_config import DpVitConfig, model_settings, model_side

MODEL_VERSION = 1
CANARY_VERSION = 3
"""Version of the gradient-canary audit run (its cache key)."""
TRAINED_CLASSIFIER = "trained_classifier"
"""What :class:`DpVit` provides to adversaries: its trained models (see :class:`Classifier`)."""
UNIT = "training record (DP-SGD)"
GROUP_NOTE = ("a training record is one image: a person with k images in the training set is protected "
              "only by group privacy (about k times epsilon)")


@dataclass
class Classifier:
    """A trained classifier (one model, or two fused by Eqs. 14-17) with its training facts.

    Attributes:
        models: The trained models (eval mode).
        report: Training facts (noise multiplier, steps, epsilon, per-epoch loss, ...).
        device: Where the models run.
        side: The models' input side: stored images are resized to it (:func:`bench.nn.vit.vit_inputs`).
    """

    models: list[nn.Module]
    report: dict[str, Any]
    device: torch.device
    side: int

    def probs(self, images: torch.Tensor) -> torch.Tensor:
        """Returns class probabilities [N, classes] of uint8 images (fused when two models)."""
        return predict_proba(self.models, vit_inputs(images, self.side), device=self.device)

    def losses(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Returns the per-example cross-entropy [N] of uint8 images."""
        return per_example_loss(self.models, vit_inputs(images, self.side), labels, device=self.device)


class _Members(nn.Module):
    """The trained models as one module, so one cache entry holds a fused pair."""

    def __init__(self, models: list[nn.Module]):
        super().__init__()
        self.members = nn.ModuleList(models)


class DpVit(Task):
    """Image classification by a ViT trained with DP-SGD on the release; top-1 / top-5 on test."""

    metrics: ClassVar[dict[str, bool]] = {
        "top1": True,
        "top1_ci95": False,
        "top5": True,
        "top1_nonprivate": True,
        "top5_nonprivate": True,
        "dp_epsilon": False,
        "dp_epsilon_check": False,
        "dp_noise_multiplier": True,
        "dp_steps": False,
        "dp_accountants_agree": True,
    }
    primary: ClassVar[str] = "top1"
    description: ClassVar[str] = "ViT trained with DP-SGD (flat / per-layer / per-layer median, fusion); top-1, top-5"
    config_class: ClassVar[type] = DpVitConfig
    version: ClassVar[int] = MODEL_VERSION
    validation: ClassVar[bool] = True
    provides: ClassVar[tuple[str, ...]] = (TRAINED_CLASSIFIER,)
    entry_settings: ClassVar[tuple[str, ...]] = ("training",)
    tunable: ClassVar[ParamSpace] = ParamSpace(**{
        "training.epsilon": Param(float, 3.0, low=0.0, low_open=True, log=True, tune=(0.5, 16.0),
                                  help="target epsilon of DP-SGD per training record"),
        "training.max_grad_norm": Param(float, 1.0, low=0.0, low_open=True, log=True, tune=(0.1, 10.0),
                                        help="clipping norm C"),
        "training.clipping": Param(str, "flat", choices=("flat", "per_layer", "per_layer_median"),
                                   help="clipping mode"),
    })

    def data_options(self) -> dict[str, Any]:
        """Returns the loader options of this profile."""
        return dict(self.config.data)

    def config_dict(self) -> dict[str, Any]:
        """Returns the resolved configuration (``model.image_size`` only where set, so boards keep their keys)."""
        return {**asdict(self.config), "model": model_settings(self.config.model)}

    def input_size(self) -> tuple[int, int]:
        """Returns the ViT's input (``model.image_size``, square)."""
        side = model_side(self.config, self.owner)
        return (side, side)

    def model_inputs(self, images: ImageSet) -> ImageSet:
        """Returns ``images`` (labels kept) resized to the ViT's input: what every model of the cell sees.

        The target, the non-private reference and the adversary's reference and canary
        models all take their images through this one resize, so they see the same inputs.
        """
        resized = vit_inputs(images.images, model_side(self.config, self.owner))
        return images if resized is images.images else ImageSet(images=resized, labels=images.labels)

    def entry_label(self) -> str:
        """Returns the training method's label (``DP-SGD(flat, ε=3)``)."""
        return self.config.training.label()

    def check_data(self, shape: DataShape | None, eval_split: str = "test") -> None:
        """Checks the method against the training set's size and the splits the cell needs.

        Raises:
            BenchError: delta not below 1/N, a missing split, an empty training or evaluated
                split, or private selection on a validation cell (it would select on what the
                cell reports).
        """
        if shape is not None:
            for split in ("train", eval_split, "population"):
                if split not in shape:
                    raise BenchError(f"task {self.name!r}: dataset {self.dataset!r} has no {split!r} split "
                                     f"(dp_vit needs train, val, test and population)")
            for split in ("train", eval_split):
                if not shape[split].images:
                    share = " (task.data.image_fractions)" if self.dataset == "folder_images" else ""
                    raise BenchError(f"task {self.name!r}: the {split!r} split has no images; add images to each "
                                     f"class, or give {split!r} a larger share of them{share}")
            self.config.training.validate(shape["train"].images)
        if eval_split == "val" and self.config.training.selection == "private_val":
            raise BenchError(f"task {self.name!r}: task.training.selection=private_val selects on the validation "
                             "split a tuning cell reports; tune with selection fixed")
        _check_vit(model_side(self.config, self.owner), **self._model_kwargs(2))  # patch / heads, before any work

    def training_claim(self, clean: Splits) -> PrivacyClaim | None:
        """Returns DP-SGD's claim for one training record at the run's delta (None when non-private).

        The epsilon is the accountant's for the noise multiplier and schedule the run
        used, computed without training (the cached report is checked against it).
        """
        method = self.config.training
        if not method.private:
            return None
        facts = self._accounting(len(clean["train"]))
        note = f"{GROUP_NOTE}; {facts['note']}" if facts["note"] else GROUP_NOTE
        return PrivacyClaim(epsilon=facts["epsilon"], delta=facts["delta"], unit=UNIT, note=note,
                            backed=method.backed, method=method.label())

    def evaluate(self, clean: Splits, released: Release, ctx: RunContext) -> dict[str, float]:
        """Trains (or reuses) the DP model on the release and the non-private one on clean images; tests both."""
        target = self.classifier(clean, released, ctx)
        reference = self.classifier(clean, None, ctx)
        split = ctx.eval_split
        top1, top5 = topk_accuracy(target.probs(released.splits[split].images), released.splits[split].labels)
        ref1, ref5 = topk_accuracy(reference.probs(clean[split].images), clean[split].labels)
        n = len(released.splits[split])
        facts = target.report
        agree = accountants_agree(facts)
        if self.config.training.private:
            planned = self._accounting(len(clean["train"]))["epsilon"]
            if not math.isclose(float(facts["epsilon"]), float(planned), rel_tol=1e-9, abs_tol=1e-12):
                raise RuntimeError(f"the trained model's epsilon {facts['epsilon']} is not the claimed {planned}")
        return {
            "top1": top1, "top1_ci95": 1.96 * math.sqrt(max(top1 * (1 - top1), 1e-12) / n), "top5": top5,
            "top1_nonprivate": ref1, "top5_nonprivate": ref5,
            "dp_epsilon": float(facts.get("epsilon", math.inf)), "dp_epsilon_check": float(facts.get("epsilon_check", math.inf)),
            "dp_noise_multiplier": float(facts.get("noise_multiplier", 0.0)), "dp_steps": float(facts.get("steps", 0)),
            "dp_accountants_agree": agree,
        }

    # --- what adversaries may ask for (``provides = ("trained_classifier",)``) -----------------

    def classifier(self, clean: Splits, released: Release | None, ctx: RunContext) -> Classifier:
        """Returns the model trained on the release's train split by this cell's method.

        With ``released=None``: the non-private reference trained on the clean train split
        (shared by every mechanism and method).
        """
        classes = class_count(clean)
        if released is None:
            return self._trained(clean["train"], ("clean", clean.fingerprint), self.nonprivate_method(), classes, ctx)
        val = released.splits["val"] if "val" in released.splits else None
        return self._trained(released.splits["train"], ("release", released.key), self.config.training, classes,
                             ctx, val)

    def reference_classifiers(self, images: ImageSet, data_key: str, private: bool, subsets: list[torch.Tensor],
                              classes: int, ctx: RunContext) -> list[Classifier]:
        """Trains (or reuses) the adversary's reference models on subsets of ``images`` with this cell's recipe.

        They are trained like the target (method, schedule, model) except that model
        selection is the last epoch: the adversary has no private validation budget.

        Args:
            images: The adversary's population data (disjoint from every training record).
            data_key: Content key of ``images`` (release key or clean fingerprint).
            private: Use this cell's training method (True) or its non-private twin.
            subsets: One index tensor per reference model.
            classes: Number of classes.
            ctx: The run.

        Each model has a seed of its own (initialisation, sampling, noise), so two models on
        the same data still differ as independently trained models do.
        """
        method = replace(self.config.training, selection="fixed") if private else self.nonprivate_method()
        return [self._trained(images.subset(index), ("reference", data_key, i, index.tolist()), method, classes, ctx,
                              seed=derive_seed(ctx.seed, "dp_vit", "reference", i))
                for i, index in enumerate(subsets)]

    def canary_audit_run(self, train: ImageSet, data_key: str, private: bool, included: Any, classes: int,
                         ctx: RunContext, delta: float = 0.0) -> dict[str, Any]:
        """Trains once with gradient canaries (:mod:`bench.privacy.dpsgd.canaries`) and returns their scores.

        The model is trained like the target (method, schedule, model, the run's seed) on
        ``train`` plus the included canaries, which the training's loader samples as records;
        nothing trained is kept. With fusion only the first model carries canaries (a view of
        part of the release, so the bound stays valid). Cached by content.

        Args:
            train: The training records (the release's train split, or the clean one).
            data_key: Content key of ``train``.
            private: Audit this cell's method (True) or its non-private twin.
            included: Each canary's inclusion coin, bool [m].
            classes: Number of classes.
            ctx: The run.
            delta: The claim's δ, at which the measured mechanism's ε is stated (private runs).

        Returns:
            ``scores`` (float64 [m]), ``steps``, ``norm`` (each canary's gradient norm),
            ``support`` (parameter tensors used), ``noise_std`` (σ·C; 0 when non-private),
            ``sample_rate``, ``geometry`` (``values``, ``sizes``, ``slot`` of the layout) and, for a
            private run, ``observed`` (:mod:`bench.privacy.dpsgd.observed`'s ``observed.*`` facts).
        """
        coins = np.asarray(included, dtype=bool)
        method = replace(self.config.training, selection="fixed") if private else self.nonprivate_method()
        size = model_side(self.config, self.owner)
        key = content_key("dp_vit-gradient-canaries", CANARY_VERSION, MODEL_VERSION, data_key,
                          model_settings(self.config.model), asdict(method), asdict(self.config.schedule), ctx.seed,
                          classes, size, hashlib.sha256(coins.tobytes()).hexdigest(), float(delta) if private else 0.0)

        def run() -> dict[str, Any]:
            canaries = GradientCanaries(coins, ctx.seed)  # its records take the shape of the model's inputs
            trained = train_private(lambda: build_vit(size, **self._model_kwargs(classes)),
                                    vit_inputs(train.images, size), train.labels, method, self.config.schedule,
                                    ctx.seed, ctx.device, progress=ctx.progress, canaries=canaries)
            sigma = float(trained.report.get("noise_multiplier", 0.0) or 0.0)
            rate = float(trained.report.get("sample_rate", 0.0) or 0.0)
            geometry = canaries.geometry
            return {"scores": torch.from_numpy(np.array(canaries.scores)), "steps": canaries.steps,
                    "norm": canaries.norm, "support": canaries.support,
                    "noise_std": sigma * method.max_grad_norm if private else 0.0, "sample_rate": rate,
                    "geometry": {"values": torch.from_numpy(geometry.values), "sizes": torch.from_numpy(geometry.sizes),
                                 "slot": torch.from_numpy(geometry.slot)},
                    "observed": {**canaries.meter.result(rate, delta),
                                 "observed.per_sample_error": canaries.per_sample_error}
                    if canaries.meter is not None else {}}

        out, _ = Cache(ctx.cache_dir).get_or_build("audits", key, run, describe=f"gradient canaries: {data_key}"[:300])
        geometry = CanaryGeometry(**{k: np.asarray(v) for k, v in out["geometry"].items()})
        return {**out, "scores": np.asarray(out["scores"], dtype=np.float64), "geometry": geometry}

    def nonprivate_method(self) -> TrainingMethod:
        """The non-private reference's method: one ViT, same schedule, no clipping or noise, last epoch.

        It is the same for every mechanism and every training method of a board (clipping,
        fusion and private selection are properties of a private method, not of the
        reference), so one cached model serves them all.
        """
        return TrainingMethod(epsilon=math.inf)

    # --- internals ---------------------------------------------------------------------------

    def _trained(self, train: ImageSet, data_key: tuple, method: TrainingMethod, classes: int, ctx: RunContext,
                 val: ImageSet | None = None, seed: int | None = None) -> Classifier:
        seed = ctx.seed if seed is None else seed
        size = model_side(self.config, self.owner)
        count = 2 if method.fusion else 1
        method.validate(len(train))
        if method.selection == "private_val" and val is None:
            raise BenchError(f"task {self.name!r}: task.training.selection=private_val needs a val split")
        key_parts = ("dp_vit", MODEL_VERSION, data_key, model_settings(self.config.model), asdict(method),
                     asdict(self.config.schedule), seed, classes, size)

        def build() -> nn.Module:
            return _Members([build_vit(size, **self._model_kwargs(classes)) for _ in range(count)])

        def train_into(members: nn.Module) -> dict[str, Any]:
            validation = None if method.selection != "private_val" else (vit_inputs(val.images, size), val.labels)
            trained = train_private(lambda: build_vit(size, **self._model_kwargs(classes)),
                                    vit_inputs(train.images, size), train.labels,
                                    method, self.config.schedule, seed, ctx.device, val=validation,
                                    progress=ctx.progress)
            for slot, model in zip(members.members, trained.models):
                slot.load_state_dict(model.state_dict())
            losses = [trained.report[f"loss_epoch_{e}"] for e in range(1, self.config.schedule.epochs + 1)]
            return {**trained.report, "curve": {"loss": losses}}

        name = "reference" if not method.private else f"eps_{method.dp_epsilon:g}"
        members, report = cached_model(ctx.cache_dir, key_parts, build, train_into, ctx.log, name=f"dp_vit.{name}")
        members = members.to(ctx.device).eval()
        return Classifier(list(members.members), report, ctx.device, size)

    def _accounting(self, n_train: int) -> dict[str, Any]:
        """The claim's facts for N records, computed once per task (a PRV evaluation takes seconds)."""
        memo = self.__dict__.setdefault("_facts", {})
        if n_train not in memo:
            memo[n_train] = accounting_facts(self.config.training, self.config.schedule, n_train)
        return memo[n_train]

    def _model_kwargs(self, classes: int) -> dict[str, Any]:
        m = self.config.model
        return {"patch_size": m.patch_size, "depth": m.depth, "width": m.width, "heads": m.heads,
                "mlp_dim": m.mlp_dim, "classes": classes}


@functools.lru_cache(maxsize=64)
def _check_vit(image_size: Any, **model: Any) -> None:
    """Builds the ViT once per shape, so that an impossible patch or head split fails when the cell is planned.

    Raises:
        BenchError: The model cannot be built (:func:`bench.nn.vit.build_vit`); not cached.
    """
    build_vit(image_size, **model)


def accountants_agree(facts: dict[str, Any]) -> float:
    """Returns 1.0 when the run's two accountants agree within what is known (:class:`CrossCheck`), NaN when non-private.

    Raises:
        RuntimeError: They disagree: the claimed epsilon cannot be trusted, so the cell fails.
    """
    epsilon, check = float(facts.get("epsilon", math.inf)), float(facts.get("epsilon_check", math.inf))
    if not math.isfinite(epsilon):
        return math.nan
    prv, rdp = (epsilon, check) if facts.get("accountant") == "prv" else (check, epsilon)
    verdict = CrossCheck(prv, rdp)
    if not verdict.holds:
        raise RuntimeError(f"the PRV and RDP accountants disagree beyond their known difference (PRV {prv:.4g}, "
                           f"RDP {rdp:.4g}, ratio {verdict.ratio:.3g}): the epsilon cannot be claimed")
    return 1.0
