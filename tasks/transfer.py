"""Transfer: is a backbone pretrained on face-obfuscated images as good a starting point? (Yang et al. 2022, Sec. 5)

The backbone is the classifier of ``classify_<source>`` trained on the released source
(:func:`tasks.classify.trained_classifier`, the same cached model), and beside it the one
trained on the original source. Each gets a fresh output layer and is finetuned on the
target dataset (``finetune``: the last layer on a frozen backbone, or the whole network,
as the paper), then tested on the target's test split: top-1 for classes (CIFAR-10, a
scene folder, synth_scenes classes disjoint from the source's), mAP over binary labels for
attributes (CelebA's 40; synth_faces' attributes one-hot), with binary cross-entropy per
label as the paper. The target is never released: only the source passed through the
mechanism.

Reported: ``transfer`` (the released-source backbone's score, primary),
``transfer_original`` and ``transfer_diff`` (released - original) with a 95% paired
bootstrap interval over the target's test images (``transfer_diff_ci95``: half-width;
``transfer_diff_lo`` / ``_hi``: the percentile bounds).

Backbone weights given locally must not have seen faces: they are refused unless
``weights_saw_faces`` is false.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch

from bench.core.config import setting
from bench.core.interfaces import Release, RunContext
from bench.data.base import DataShape, ImageSet, Splits, load_dataset
from bench.errors import BenchError
from bench.nn.classifiers import Classifier
from bench.nn.stream_train import SgdSchedule, predict, train_streamed
from bench.randomness.seeding import derive_seed, make_generator
from bench.storage.modelcache import cached_model
from tasks.class_metrics import (
    bootstrap_interval,
    bootstrap_mean_interval,
    class_count,
    nanmean,
    per_class_ap,
    topk_hits,
)
from tasks.classify import Recipe, RecipeTask, source_key, trained_classifier

MODEL_VERSION = 1
LABELS = ("classes", "attributes")
FINETUNE = ("last_layer", "whole")
BOOTSTRAP = 1000


@dataclass(frozen=True)
class TransferConfig(Recipe):
    """Settings of a transfer profile (``tasks/presets/transfer_<source>.yaml``): the source recipe, plus:

    Attributes:
        data: Loader options of the source dataset (as its classify benchmark's).
        target: The target dataset (fixed by the benchmark).
        target_data: Target dataset name -> its loader options (one preset serves every
            target of a source; the benchmark picks the entry).
        target_labels: ``classes`` (single-label, top-1) or ``attributes`` (multi-label, mAP).
        target_attributes: Attributes to predict (None: all, duplicates dropped).
        finetune: ``last_layer`` (frozen backbone) or ``whole``.
        finetune_schedule: The finetuning's SGD recipe.
    """

    data: dict = field(default_factory=dict)
    target: str = "synth_scenes"
    target_data: dict = field(default_factory=dict)
    target_labels: str = setting("classes", choices=LABELS)
    target_attributes: list | None = None
    finetune: str = setting("whole", choices=FINETUNE)
    finetune_schedule: SgdSchedule = field(default_factory=lambda: SgdSchedule(epochs=90, lr=0.01))


class Transfer(RecipeTask):
    """A backbone pretrained on the released source, finetuned on a target; top-1 or mAP against the original's."""

    metrics: ClassVar[dict[str, bool]] = {
        "transfer": True, "transfer_original": True, "transfer_diff": True, "transfer_diff_ci95": False,
        "transfer_diff_lo": True, "transfer_diff_hi": True, "source_top1": True, "source_top1_original": True,
    }
    primary: ClassVar[str] = "transfer"
    description: ClassVar[str] = "backbone pretrained on the released source, finetuned on a target; top-1 / mAP"
    config_class: ClassVar[type] = TransferConfig
    version: ClassVar[int] = MODEL_VERSION

    def __init__(self, profile: str = "quick", overrides: Any = None):
        super().__init__(profile, overrides)
        self.recipe().refuse_face_weights(self.owner, "a transfer backbone pretrained on the released source "
                                                      "must not have seen")

    def target_options(self) -> dict[str, Any]:
        """Returns the target dataset's loader options."""
        return dict(self.config.target_data.get(self.config.target) or {})

    def check_data(self, shape: DataShape | None, eval_split: str = "test") -> None:
        """Checks the source's train split and the input size.

        Raises:
            BenchError: A missing split, or an input the network cannot take.
        """
        self.check_recipe(shape, ("train",))

    def other_datasets(self) -> tuple[str, ...]:
        """Returns the target, which the task reads besides its source."""
        return (self.config.target,)

    def check_other_data(self, root: Path | None, eval_split: str = "test") -> None:
        """Checks, cheaply, that the target's data is there with a train and an evaluated split.

        Raises:
            BenchError: Missing target data (naming its layout) or a missing split.
        """
        from bench.core.registry import datasets

        shape = datasets.get(self.config.target)().inspect(root, self.target_options())
        for split in ("train", eval_split):
            if shape is not None and split not in shape:
                raise BenchError(f"{self.owner}: target {self.config.target!r} has no {split!r} split")

    def evaluate(self, clean: Splits, released: Release, ctx: RunContext) -> dict[str, float]:
        """Finetunes the released-source and original-source backbones on the target; compares them on its test split."""
        cfg, split = self.config, ctx.eval_split
        ctx.log(f"loading the target {cfg.target} (or reading it from the cache)")
        target = load_dataset(cfg.target, ctx.data_root, self.target_options(), ctx.cache_dir)
        columns = target_columns(target["train"], cfg.target_labels, cfg.target_attributes, self.owner)
        truth = label_matrix(target[split], cfg.target_labels, columns)
        outputs = {}
        source = {}
        for origin, data in (("released", released), ("original", None)):
            backbone = trained_classifier(clean, data, self.recipe(), ctx)
            source[origin] = _source_top1(backbone, released if data is not None else None, clean, cfg.input_size, ctx)
            model = self._finetuned(backbone, source_key(clean, data), target, columns, ctx)
            outputs[origin] = predict(model, target[split].images, cfg.input_size, ctx.device)
        score = {k: target_score(v, truth, cfg.target_labels) for k, v in outputs.items()}
        lo, hi = paired_bootstrap(outputs["released"], outputs["original"], truth, cfg.target_labels,
                                  make_generator(ctx.seed, "transfer", "bootstrap"))
        diff = score["released"] - score["original"]
        return {"transfer": score["released"], "transfer_original": score["original"], "transfer_diff": diff,
                "transfer_diff_ci95": (hi - lo) / 2, "transfer_diff_lo": lo, "transfer_diff_hi": hi,
                "source_top1": source["released"], "source_top1_original": source["original"]}

    def _finetuned(self, backbone: Classifier, backbone_key: tuple, target: Splits, columns: Any,
                   ctx: RunContext) -> Classifier:
        cfg = self.config
        outputs = len(columns) if cfg.target_labels == "attributes" else class_count(target)
        train = target["train"]
        labels = label_matrix(train, cfg.target_labels, columns)
        key = ("transfer-model", MODEL_VERSION, backbone_key, asdict(self.recipe()), target.fingerprint,
               cfg.target_labels, list(map(str, columns)) if cfg.target_labels == "attributes" else outputs,
               cfg.finetune, asdict(cfg.finetune_schedule), ctx.seed, ctx.device.type)
        seed = derive_seed(ctx.seed, "transfer", "finetune")

        def build() -> Classifier:
            model = copy.deepcopy(backbone)
            torch.manual_seed(seed)
            model.replace_head(outputs)
            return model.to(ctx.device)

        def fit(model: Classifier) -> dict[str, Any]:
            ctx.log(f"finetuning ({cfg.finetune}) on {cfg.target}: {len(train)} images")
            params = list(model.head().parameters()) if cfg.finetune == "last_layer" else None
            return train_streamed(model, train.images, labels, cfg.finetune_schedule, cfg.input_size, ctx, seed,
                                  multilabel=cfg.target_labels == "attributes", params=params,
                                  desc=f"finetune on {cfg.target}")

        model, _ = cached_model(ctx.cache_dir, key, build, fit, ctx.log, name=f"transfer.{backbone_key[0]}")
        return model


def target_columns(split: ImageSet, labels: str, wanted: list | None, owner: str) -> list[tuple[str, int]]:
    """Returns the binary labels of an attribute target: (attribute, value) pairs, one per label.

    A two-valued attribute gives one label (value 1), a many-valued one a label per value;
    without ``wanted``, every attribute except identities, in the split's order, dropping a
    label equal to an earlier one or to its complement (CelebA's ``gender`` is ``male``).

    Raises:
        BenchError: A wanted attribute the target does not label, or none at all.
    """
    if labels == "classes":
        return []
    names = list(wanted) if wanted else [a for a in split.attrs if a not in ("identity", "n_faces")]
    missing = [a for a in names if a not in split.attrs]
    if missing or not names:
        raise BenchError(f"{owner}: the target labels no attribute {missing[0] if missing else ''!r} "
                         f"(it has {', '.join(split.attrs) or 'none'})")
    columns, seen = [], []
    for name in names:
        values = split.attr_names.get(name) or [str(v) for v in range(int(split.attrs[name].max()) + 1)]
        for value in ([1] if len(values) == 2 else range(len(values))):
            column = split.attrs[name] == value
            if wanted or not any(torch.equal(column, s) or torch.equal(column, ~s) for s in seen):
                columns.append((name, value))
                seen.append(column)
    return columns


def label_matrix(split: ImageSet, labels: str, columns: list[tuple[str, int]]) -> torch.Tensor:
    """Returns the class labels [N], or the 0/1 attribute targets [N, K] of ``columns`` (a missing value is 0)."""
    if labels == "classes":
        return split.labels
    return torch.stack([(split.attrs[name] == value).long() for name, value in columns], dim=1)


def target_score(scores: torch.Tensor, truth: torch.Tensor, labels: str) -> float:
    """Returns top-1 accuracy (classes) or mean AP over the labels with positives (attributes)."""
    if labels == "classes":
        return float((scores.argmax(1) == truth).double().mean())
    return nanmean(per_class_ap(scores, truth))


def paired_bootstrap(a: torch.Tensor, b: torch.Tensor, truth: torch.Tensor, labels: str,
                     generator: torch.Generator, resamples: int = BOOTSTRAP) -> tuple[float, float]:
    """Returns the 2.5 and 97.5 percentiles of score(a) - score(b) over test images resampled together.

    Top-1 differences are resampled in one vectorised draw; mAP (attributes) is recomputed
    on each of ``resamples // 5`` resamples (each AP sorts the whole test set).
    """
    if labels == "classes":
        return bootstrap_mean_interval(topk_hits(a, truth, 1) - topk_hits(b, truth, 1), generator, resamples)

    def difference(index: torch.Tensor) -> float:
        return target_score(a[index], truth[index], labels) - target_score(b[index], truth[index], labels)

    return bootstrap_interval(difference, len(truth), generator, max(20, resamples // 5))


def _source_top1(model: Classifier, released: Release | None, clean: Splits, size: int, ctx: RunContext) -> float:
    """Returns the backbone's top-1 on the source's evaluated split as it was trained (released or original)."""
    split = released.splits[ctx.eval_split] if released is not None else clean[ctx.eval_split]
    scores = predict(model, split.images, size, ctx.device)
    return float((scores.argmax(1) == split.labels).double().mean())
