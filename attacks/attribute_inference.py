"""Attribute inference adversary (cross-camera reID paper, Sec. III-C and IV-B).

A leaked release is used for an adverse task: a ResNet backbone with one linear layer is
trained on the released training images to predict a demographic attribute and tested on
the released test images (query and gallery for reID datasets, whose identities are
disjoint from training). One model is trained per attribute, as in the paper. Each
attribute reports the accuracy on the release, the accuracy of the same attack on clean
images (trained and tested clean, cached once per dataset) and the majority-class rate
(always answering the training set's most frequent value), the chance level.

Each attribute is a part of the outcome (its own accuracy, clean accuracy, majority rate
and number of test images), so the attack's privacy score is its worst attribute. ``acc``,
``acc_clean`` and ``chance`` repeat the first attribute's numbers.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import torch

from bench.core.benchmarks import declared_attributes
from bench.core.config import setting
from bench.core.groups import DEMOGRAPHICS, attack_groups, demographic_groups
from bench.core.interfaces import Attack, AttackOutcome, Release, RunContext
from bench.core.keys import content_key
from bench.core.registry import register_attack
from bench.data.attribute_table import coding_note
from bench.data.base import ImageSet, Splits
from bench.errors import BenchError
from bench.nn.augment import augment
from bench.nn.classify import ClassifierTraining, train_classifier
from bench.nn.images import embed_images
from bench.nn.resnet import ARCHS, AttributeNet, check_weights
from bench.nn.threads import cpu_threads
from bench.randomness.seeding import derive_seed
from bench.storage.modelcache import cached_model

MODEL_VERSION = 1
KNOWN_ATTRIBUTES = ("gender", "age", "race")


@dataclass(frozen=True)
class AttributeConfig:
    """Settings of one attribute_inference profile (``attacks/presets/attribute_inference.yaml``).

    Attributes:
        attributes: Attributes to infer; None: those the benchmark declares (the paper's
            choice: gender on Market-1501, gender / age / race on FairFace).
        arch: ResNet backbone.
        weights: Local ImageNet weights of the backbone, or None to train from scratch.
        input_height: Network input height, the width keeping the images' aspect ratio;
            None keeps the released size.
        epochs: Passes over the training images.
        batch_size: Images per step.
        lr: Peak Adam learning rate (one-cycle schedule).
        weight_decay: Adam weight decay.
        pad: Zero-padding of the random-crop augmentation, in input pixels.
        train_split: Split the adversary trains on.
        test_splits: Splits it is tested on; None: ``test`` if present, else query + gallery.
        threads: CPU threads while training and testing (None: torch's setting).
    """

    attributes: tuple[str, ...] | None = None
    arch: str = "resnet50"
    weights: str | None = None
    input_height: int | None = setting(None, low=8)
    epochs: int = setting(10, low=1)
    batch_size: int = setting(64, low=1)
    lr: float = setting(1e-3, low=0, low_open=True)
    weight_decay: float = setting(5e-4, low=0)
    pad: int = setting(4, low=0)
    train_split: str = "train"
    test_splits: tuple[str, ...] | None = None
    threads: int | None = setting(None, low=1)

    def training_part(self) -> dict[str, Any]:
        """Returns the settings an attribute model's weights depend on."""
        keep = {"arch", "weights", "input_height", "epochs", "batch_size", "lr", "weight_decay", "pad", "train_split"}
        return {k: v for k, v in asdict(self).items() if k in keep}


@dataclass(frozen=True)
class CleanAttribute:
    """The clean reference of one attribute: its clean-trained classifier and test facts.

    Attributes:
        model: The classifier trained on clean images.
        acc: Its accuracy on the clean test images.
        majority: The majority-class rate on the test images (the chance level).
        test_images: How many test images have the attribute (the trials).
        hits: Per test image, whether the clean classifier was right.
        chance_hits: Per test image, whether the training majority value is its value.
        groups: Demographic groups of the test images (by the other attributes).
    """

    model: torch.nn.Module
    acc: float
    majority: float
    test_images: int
    hits: torch.Tensor | None = None
    chance_hits: torch.Tensor | None = None
    groups: dict[str, Any] | None = None

    def outcome(self, attr: str, acc: float, released_hits: torch.Tensor | None = None, **extra: float) -> AttackOutcome:
        """Returns the outcome of an attack that reached ``acc`` on released test images.

        With ``released_hits`` (per test image) it carries the attack per demographic group.
        """
        metrics = {f"acc_{attr}": acc, f"clean_acc_{attr}": self.acc, f"majority_{attr}": self.majority,
                   f"test_images_{attr}": float(self.test_images), **extra}
        groups = {}
        if released_hits is not None and self.groups and self.hits is not None:
            groups = attack_groups(released_hits.numpy(), self.hits.numpy(), self.chance_hits.numpy(), self.groups,
                                   f"acc_{attr}")
        return AttackOutcome(metrics=metrics, value=acc, clean=self.acc, chance=self.majority, trials=self.test_images,
                             groups=groups)


@register_attack("attribute_inference")
class AttributeInference(Attack):
    """ResNet + linear classifier of demographic attributes trained on released images."""

    metrics: ClassVar[dict[str, bool]] = {
        "acc": True,
        "acc_clean": True,
        "chance": True,
        **{f"{m}_{a}": True for a in KNOWN_ATTRIBUTES for m in ("acc", "clean_acc", "majority")},
    }
    primary: ClassVar[str] = "acc"
    description = "ResNet + linear head trained on released images to predict gender (age, race); accuracy vs majority class"

    config_class: ClassVar[type] = AttributeConfig
    version: ClassVar[int] = MODEL_VERSION
    config: AttributeConfig

    def __init__(self, profile: str = "quick", overrides: dict[str, Any] | None = None):
        super().__init__(profile, overrides)
        owner = "attack 'attribute_inference'"
        if self.config.arch not in ARCHS:
            raise BenchError(f"{owner}: unknown arch {self.config.arch!r} (available: {', '.join(ARCHS)})")
        check_weights(self.config.weights, owner)

    def config_dict(self) -> dict[str, Any]:
        """Returns the resolved profile settings."""
        return asdict(self.config)

    def attributes_for(self, dataset: str, ctx: RunContext) -> tuple[str, ...]:
        """Returns the attributes attacked: ``attributes``, else those the run's benchmark declares.

        Args:
            dataset: The dataset attacked (names the benchmark when the run does not).
            ctx: The run.

        Raises:
            BenchError: Neither ``attributes`` nor the benchmark names any.
        """
        names = self.config.attributes or declared_attributes(ctx, dataset, "attribute_inference")
        if not names:
            where = f"benchmark {ctx.benchmark!r}" if ctx.benchmark else f"dataset {dataset!r}"
            raise BenchError(f"attribute_inference: no attributes declared for {where} "
                             f"(use --set attribute_inference.attributes=gender)")
        return tuple(names)

    def test_splits(self, clean: Splits, ctx: RunContext) -> tuple[str, ...]:
        """Returns the splits the attack is tested on: ``test_splits``, else the evaluated split
        (``test``, or ``val`` when tuning) where the dataset has it, else query + gallery (test only).

        Raises:
            BenchError: The evaluated split is ``val`` and the dataset has none.
        """
        if self.config.test_splits:
            return tuple(self.config.test_splits)
        if ctx.eval_split in clean:
            return (ctx.eval_split,)
        if ctx.eval_split != "test":
            raise BenchError(f"attribute_inference: dataset {clean.dataset!r} has no {ctx.eval_split!r} split "
                             f"to test on")
        return ("query", "gallery")

    def run(self, clean: Splits, released: Release, ctx: RunContext) -> AttackOutcome:
        """Trains (or reuses) one classifier per attribute on released and on clean images.

        Every attribute is a part of the outcome (its own accuracy, clean accuracy,
        majority rate and test-image count), so the attack's score is its worst attribute.
        """
        test_splits = self.test_splits(clean, ctx)
        released_key = ("clean", clean.fingerprint) if released.is_clean else ("release", released.key)
        parts: dict[str, AttackOutcome] = {}
        with cpu_threads(self.config.threads):
            for attr in self.attributes_for(clean.dataset, ctx):
                parts[attr] = self._attack(attr, clean, released, released_key, test_splits, ctx)
        metrics = {name: value for part in parts.values() for name, value in part.metrics.items()}
        first = next(iter(parts.values()))
        metrics.update({"acc": first.value, "acc_clean": first.clean, "chance": first.chance})
        return AttackOutcome(metrics=metrics, value=first.value, clean=first.clean, chance=first.chance,
                             trials=first.trials, parts=parts)

    def clean_classifier(
        self, attr: str, clean: Splits, test_splits: tuple[str, ...], ctx: RunContext
    ) -> CleanAttribute:
        """Returns the classifier of ``attr`` trained on clean images (cached) and its clean test facts."""
        clean_train, clean_test = self._sets(clean, attr, test_splits)
        values = self._value_count(clean, attr)
        names = clean[self.config.train_split].attr_names.get(attr)
        ctx.log(f"attribute_inference infers {coding_note(attr, names) if names else f'{attr}: {values} classes'}")
        majority = int(torch.bincount(clean_train.labels, minlength=values).argmax())
        model = self._model(attr, values, clean_train, ("clean", clean.fingerprint), ctx)
        hits, chance_hits = self.hits(model, clean_test, ctx), clean_test.labels == majority
        groups = demographic_groups(clean_test.attrs, clean_test.attr_names, exclude=(attr,))
        return CleanAttribute(model, float(hits.float().mean()), float(chance_hits.float().mean()), len(clean_test),
                              hits, chance_hits, groups)

    def _attack(
        self, attr: str, clean: Splits, released: Release, released_key: tuple, test_splits: tuple[str, ...],
        ctx: RunContext,
    ) -> AttackOutcome:
        """Returns the outcome of one attribute."""
        reference = self.clean_classifier(attr, clean, test_splits, ctx)
        if released.is_clean:
            hits = reference.hits
        else:
            rel_train, rel_test = self._sets(released.splits, attr, test_splits)
            model = self._model(attr, self._value_count(clean, attr), rel_train, released_key, ctx)
            hits = self.hits(model, rel_test, ctx)
        return reference.outcome(attr, float(hits.float().mean()), hits)

    def _value_count(self, clean: Splits, attr: str) -> int:
        """Returns how many values ``attr`` takes (its names, else the largest training label + 1)."""
        train = clean[self.config.train_split]
        return len(train.attr_names.get(attr) or []) or int(train.attrs[attr].max()) + 1

    def test_set(
        self, splits: Splits, attr: str, test_splits: tuple[str, ...], images: dict[str, torch.Tensor] | None = None
    ) -> ImageSet:
        """Returns the test images with a known ``attr``, labelled by it.

        Args:
            splits: Clean or released splits.
            attr: The attribute.
            test_splits: Splits tested on.
            images: Split name -> other images of that split to take instead (e.g.
                denoised, of any size), index for index.
        """
        parts = []
        others = [a for a in DEMOGRAPHICS if all(a in splits[name].attrs for name in test_splits)]
        for name in test_splits:
            keep = _known(splits[name], attr)
            source = splits[name].images if images is None else images[name]
            parts.append((source[keep], splits[name].attrs[attr][keep], [splits[name].attrs[a][keep] for a in others]))
        first = splits[test_splits[0]]
        return ImageSet(images=torch.cat([p[0] for p in parts]), labels=torch.cat([p[1] for p in parts]),
                        attrs={a: torch.cat([p[2][i] for p in parts]) for i, a in enumerate(others)},
                        attr_names={a: first.attr_names.get(a, []) for a in others})

    def _sets(self, splits: Splits, attr: str, test_splits: tuple[str, ...]) -> tuple[ImageSet, ImageSet]:
        """Returns (train, test) images with a known ``attr``, labelled by its value."""
        train = splits[self.config.train_split]
        if attr not in train.attrs:
            have = ", ".join(train.attrs) or "none"
            raise BenchError(f"attribute_inference: dataset {splits.dataset!r} has no attribute {attr!r} (has {have})")
        keep = _known(train, attr)
        labelled = ImageSet(images=train.images[keep], labels=train.attrs[attr][keep].clone())
        test = self.test_set(splits, attr, test_splits)
        if len(labelled) == 0 or len(test) == 0:
            raise BenchError(f"attribute_inference: no labelled {attr!r} images in {self.config.train_split} or "
                             f"{'+'.join(test_splits)} of {splits.dataset!r}")
        return labelled, test

    def input_size(self, images: torch.Tensor) -> tuple[int, int] | None:
        """Returns the network input (h, w) for images of this shape (None: as released)."""
        height = self.config.input_height
        if height is None:
            return None
        h, w = images.shape[-2:]
        return height, max(1, round(w * height / h))

    @torch.no_grad()
    def hits(self, model: torch.nn.Module, test: ImageSet, ctx: RunContext) -> torch.Tensor:
        """Returns, per test image, whether the model predicts its attribute."""
        logits = embed_images(model, test.images, self.input_size(test.images), ctx.device, batch=256)
        return logits.argmax(1).cpu() == test.labels

    def accuracy(self, model: torch.nn.Module, test: ImageSet, ctx: RunContext) -> float:
        """Returns the fraction of test images whose attribute the model predicts."""
        return float(self.hits(model, test, ctx).float().mean())

    def _model(self, attr: str, values: int, train: ImageSet, data_key: tuple, ctx: RunContext) -> torch.nn.Module:
        cfg = self.config
        key = ("attribute-model", MODEL_VERSION, attr, values, data_key, cfg.training_part(), ctx.seed,
               str(ctx.device.type))

        def build() -> torch.nn.Module:
            torch.manual_seed(derive_seed(ctx.seed, "attribute_inference", attr, "init"))
            return AttributeNet(cfg.arch, values, cfg.weights).to(ctx.device)

        def train_fn(model: torch.nn.Module) -> dict[str, Any]:
            ctx.log(f"training the {attr} classifier ({cfg.arch}, {len(train)} images, {content_key(*key)[:8]})")
            seed = derive_seed(ctx.seed, "attribute_inference", attr, "train")
            spec = ClassifierTraining(
                epochs=cfg.epochs, batch_size=cfg.batch_size, lr=cfg.lr, weight_decay=cfg.weight_decay,
                input_size=self.input_size(train.images), augment=functools.partial(augment, pad=cfg.pad),
                desc="attribute epochs",
            )
            return train_classifier(model, train.images, train.labels, spec, ctx, seed)

        model, _ = cached_model(ctx.cache_dir, key, build, train_fn, ctx.log, name=f"attribute_inference.{attr}")
        return model.to(ctx.device)


def _known(split: ImageSet, attr: str) -> torch.Tensor:
    """Returns the indices of a split's images with a known value of ``attr``."""
    if attr not in split.attrs:
        have = ", ".join(split.attrs) or "none"
        raise BenchError(f"attribute_inference: a split has no attribute {attr!r} (has {have})")
    return (split.attrs[attr] >= 0).nonzero().flatten()
