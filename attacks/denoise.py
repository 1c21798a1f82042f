"""Denoising adversary (privacy-enhanced few-shot paper, Sec. V; PROTOCOLS.md "denoise").

The adversary knows the mechanism and its parameters. It runs the mechanism, with its own
random streams, over clean images of its own identities (the training split, disjoint
from the targets), trains a DnCNN to map each result back to its original, and denoises
the released target images before attacking them with the non-adaptive pipelines (identity:
in each fold of a small dataset, a DnCNN trained on that fold's own identities; see
:mod:`attacks._targets`):

- identity (face datasets): ``face_reid``'s clean embedder and SVC enrolled on clean
  images identify denoised probes (``top1``) and raw released probes (``top1_raw``);
- attributes (reID and attribute datasets): ``attribute_inference``'s clean-trained
  classifier of each attribute is tested on denoised (``acc_<attr>``) and raw
  (``acc_raw_<attr>``) released test images.

The embedder and the classifiers are the ones ``face_reid`` and ``attribute_inference``
train and cache (same settings, same cache entries). SSIM and PSNR of the denoised images
against the clean ones (and of the raw release, ``*_raw``) show what the denoiser undid.
For the identity mechanism there is nothing to undo: no denoiser is trained
(``denoiser_trained`` is 0) and the clean numbers are reported.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch

from attacks._reid_pipeline import Fold, clean_reference, find_folds, known_mechanism, pooled_outcome
from attacks.attribute_inference import AttributeInference
from attacks.face_reid import FaceReid
from bench.core.benchmarks import declared_targets
from bench.core.config import setting
from bench.core.interfaces import Attack, AttackOutcome, Release, RunContext
from bench.core.registry import register_attack
from bench.data.base import Splits
from bench.errors import BenchError
from bench.nn.dncnn import DenoiserTraining, DnCNN, denoise_images, image_quality, train_denoiser
from bench.nn.images import prepare
from bench.nn.threads import cpu_threads
from bench.randomness.seeding import derive_seed
from bench.release.dataset import apply_to_split
from bench.storage.modelcache import cached_model

MODEL_VERSION = 1
QUALITY_IMAGES = 2000
"""Released test images SSIM/PSNR are measured on (spread over the test splits), bounding memory."""
TARGETS = ("identity", "attributes")


@dataclass(frozen=True)
class DenoiseConfig:
    """Settings of one denoise profile (``attacks/presets/denoise.yaml``).

    Attributes:
        depth: DnCNN convolution layers (8: the few-shot paper's lighter DnCNN).
        width: DnCNN hidden filters.
        downscale: The denoiser works on images shrunk by this factor (1: the released
            size); match it to the input size of the attack that follows.
        patch: Side of the random crops trained on, or None for whole images.
        epochs: Passes over the adversary's (released, clean) pairs.
        batch_size: Pairs per step.
        lr: Adam learning rate.
        train_split: The adversary's own images (disjoint identities from the targets).
        targets: What is attacked after denoising (``identity``, ``attributes``); None:
            what the benchmark declares (its attributes where it has some, else identity).
        reid: Settings of the face re-identification pipeline that differ from
            ``face_reid``'s preset (none by default, so its cached embedder is shared).
        attributes: Settings of the attribute classifiers that differ from
            ``attribute_inference``'s preset.
        threads: CPU threads while the denoiser trains and runs (None: torch's setting); the
            mechanism itself runs with torch's setting, as in the release.
    """

    depth: int = setting(8, low=2)
    width: int = setting(32, low=1)
    downscale: int = setting(1, low=1)
    patch: int | None = setting(None, low=4)
    epochs: int = setting(4, low=1)
    batch_size: int = setting(64, low=1)
    lr: float = setting(1e-3, low=0, low_open=True)
    train_split: str = "train"
    targets: tuple[str, ...] | None = None
    reid: dict = field(default_factory=dict)
    attributes: dict = field(default_factory=dict)
    threads: int | None = setting(None, low=1)

    def training_part(self) -> dict[str, Any]:
        """Returns the settings the denoiser's weights depend on."""
        keep = {"depth", "width", "downscale", "patch", "epochs", "batch_size", "lr", "train_split", "threads"}
        return {k: v for k, v in asdict(self).items() if k in keep}


@dataclass(frozen=True)
class Attacked:
    """The images an attack after denoising was run on (for SSIM/PSNR).

    Attributes:
        raw: Released images, uint8.
        denoised: Their denoised versions (uint8, at the denoiser's size), or None.
        clean: Their clean originals, uint8.
    """

    raw: torch.Tensor
    denoised: torch.Tensor | None
    clean: torch.Tensor


@register_attack("denoise")
class Denoise(Attack):
    """DnCNN trained on the adversary's own (mechanism(x), x) pairs, then the non-adaptive attacks."""

    metrics: ClassVar[dict[str, bool]] = {
        "top1": True, "top1_raw": True, "top1_clean": True, "chance": True, "ssim": True, "psnr": True,
    }
    primary: ClassVar[str] = "top1"
    description = ("knows the mechanism: DnCNN trained on its own (released, clean) pairs; face re-identification "
                   "(or attribute inference) of denoised releases")
    validation: ClassVar[bool] = True

    config_class: ClassVar[type] = DenoiseConfig
    # its own models' version and those of the adversaries it runs on the denoised images
    version: ClassVar[tuple[int, ...]] = (MODEL_VERSION, FaceReid.version, AttributeInference.version)
    config: DenoiseConfig

    def __init__(self, profile: str = "quick", overrides: dict[str, Any] | None = None):
        super().__init__(profile, overrides)
        _check_targets(self.config.targets or ())
        self.reid = FaceReid(profile, self.config.reid)
        self.attribute = AttributeInference(profile, self.config.attributes)

    def config_dict(self) -> dict[str, Any]:
        """Returns the resolved settings, with those of the pipelines that follow the denoiser."""
        return {**asdict(self.config), "reid": self.reid.config_dict(), "attributes": self.attribute.config_dict()}

    def targets_for(self, dataset: str, ctx: RunContext) -> tuple[str, ...]:
        """Returns what is attacked after denoising: ``targets``, else what the run's benchmark declares.

        Args:
            dataset: The dataset attacked (names the benchmark when the run does not).
            ctx: The run.

        Raises:
            BenchError: Neither ``targets`` nor a benchmark names any.
        """
        names = self.config.targets or declared_targets(ctx, dataset, self.name)
        if not names:
            raise BenchError(f"attack 'denoise': no benchmark declares targets for dataset {dataset!r} "
                             f"(use --set denoise.targets=identity or attributes)")
        _check_targets(names)
        return names

    def run(self, clean: Splits, released: Release, ctx: RunContext) -> AttackOutcome:
        """Trains (or reuses) the denoiser and attacks denoised and raw releases."""
        targets = self.targets_for(clean.dataset, ctx)
        parts: dict[str, AttackOutcome] = {}
        attacked: list[Attacked] = []
        if "identity" in targets:
            outcome, images = self._identity(clean, released, ctx)
            parts["identity"] = outcome
            attacked.append(images)
        if "attributes" in targets:
            denoiser = None if released.is_clean else self.denoiser(clean, released, ctx)
            outcomes, images = self._attributes(clean, released, denoiser, ctx)
            parts.update(outcomes)
            attacked.append(images)
        metrics = {name: value for part in parts.values() for name, value in part.metrics.items()}
        metrics.update(self._quality(attacked[0], ctx))
        metrics["denoiser_trained"] = float(not released.is_clean)
        first = next(iter(parts.values()))
        return AttackOutcome(metrics=metrics, value=first.value, clean=first.clean, chance=first.chance,
                             trials=first.trials, parts=parts if len(parts) > 1 else {},
                             groups=first.groups if len(parts) == 1 else {})

    def _size(self, images: torch.Tensor) -> tuple[int, int] | None:
        """Returns the (h, w) the denoiser works at, or None for the images' own size."""
        d = self.config.downscale
        h, w = images.shape[-2:]
        return None if d == 1 else (max(1, h // d), max(1, w // d))

    def restore(self, denoiser: torch.nn.Module, images: torch.Tensor) -> torch.Tensor:
        """Returns denoised uint8 images, at the denoiser's size."""
        with cpu_threads(self.config.threads):
            return denoise_images(denoiser, images, self._size(images), next(denoiser.parameters()).device)

    def denoiser(self, clean: Splits, released: Release, ctx: RunContext, fold: Fold | None = None) -> torch.nn.Module:
        """Returns the DnCNN trained on the adversary's own (mechanism(x), x) pairs (cached).

        Args:
            clean: The clean splits.
            released: The release (it carries the mechanism the adversary knows).
            ctx: The run.
            fold: A face adversary's fold, whose own images it trains on; None (and a fold
                of no folds) trains on ``train_split``.
        """
        cfg = self.config
        mechanism = known_mechanism(released, f"attack {self.name!r}")
        folded = fold is not None and bool(fold.key)
        own = fold.own if folded else clean[cfg.train_split]
        purpose = f"{self.name}/{cfg.train_split}{fold.suffix if folded else ''}"
        key = ("denoiser", MODEL_VERSION, released.key, purpose, cfg.training_part(), ctx.seed, str(ctx.device.type),
               *((fold.key,) if folded else ()))

        def build() -> torch.nn.Module:
            torch.manual_seed(derive_seed(ctx.seed, self.name, "init"))
            return DnCNN(own.images.shape[1], cfg.depth, cfg.width).to(ctx.device)

        def train_fn(model: torch.nn.Module) -> dict[str, Any]:
            ctx.log(f"{self.name}: applying {released.mechanism} to the adversary's {len(own)} own images")
            noisy, _ = apply_to_split(mechanism, own, ctx, purpose)
            ctx.log(f"{self.name}: training the DnCNN (depth {cfg.depth}, width {cfg.width})")
            spec = DenoiserTraining(epochs=cfg.epochs, batch_size=cfg.batch_size, lr=cfg.lr,
                                    size=self._size(own.images), patch=cfg.patch)
            with cpu_threads(cfg.threads):
                return train_denoiser(model, noisy, own.images, spec, ctx, derive_seed(ctx.seed, self.name, "train"))

        model, _ = cached_model(ctx.cache_dir, key, build, train_fn, ctx.log, name=f"{self.name}.denoiser")
        return model.to(ctx.device).eval()

    def _quality(self, attacked: Attacked, ctx: RunContext) -> dict[str, float]:
        """Returns SSIM/PSNR of denoised and of raw released images against clean ones, at the denoiser's size."""
        size = self._size(attacked.clean)
        reference = prepare(attacked.clean, size, ctx.device)
        raw = image_quality(prepare(attacked.raw, size, ctx.device), reference)
        denoised = raw if attacked.denoised is None else image_quality(attacked.denoised.to(ctx.device), reference)
        return {**denoised, **{f"{name}_raw": value for name, value in raw.items()}}

    def _identity(self, clean: Splits, released: Release, ctx: RunContext) -> tuple[AttackOutcome, Attacked]:
        """Face re-identification of raw and denoised released probes (clean embedder and enrolment), per fold.

        Each fold's DnCNN is trained on that fold's own identities, disjoint from its targets.
        """
        cfg = self.reid.config
        folds = find_folds(clean, cfg, ctx, f"attack {self.name!r}")
        hits, raw_hits, clean_hits, raws, denoised, cleans = [], [], [], [], [], []
        for fold in folds:
            targets = fold.targets
            if not fold.key:
                shared = set(clean[self.config.train_split].labels.tolist()) & set(targets.images.labels.tolist())
                if shared:
                    raise BenchError(f"attack {self.name!r}: its own split {self.config.train_split!r} shares "
                                     f"{len(shared)} identities with the evaluated split {targets.split!r}")
            identifier, fold_clean_hits = clean_reference(cfg, clean, fold, ctx)
            raw = targets.released_probes(released)
            truth = targets.probe_labels()
            fold_raw_hits = identifier.hits(raw, truth)
            restored = None if released.is_clean else self.restore(self.denoiser(clean, released, ctx, fold), raw)
            hits.append(fold_raw_hits if restored is None else identifier.hits(restored, truth))
            raw_hits.append(fold_raw_hits)
            clean_hits.append(fold_clean_hits)
            raws.append(raw)
            denoised.append(restored)
            cleans.append(targets.images.images[targets.probe])
        outcome = pooled_outcome(folds, hits, clean_hits, top1_raw=float(np.concatenate(raw_hits).mean()))
        images = None if released.is_clean else torch.cat(denoised)
        return outcome, Attacked(torch.cat(raws), images, torch.cat(cleans))

    def _attributes(self, clean: Splits, released: Release, denoiser: torch.nn.Module | None,
                    ctx: RunContext) -> tuple[dict[str, AttackOutcome], Attacked]:
        """Attribute inference on raw and denoised released test images (clean-trained classifiers)."""
        attack = self.attribute
        test_splits = attack.test_splits(clean, ctx)
        if self.config.train_split in test_splits:
            raise BenchError(f"attack {self.name!r}: its training split {self.config.train_split!r} is a test split")
        denoised = None
        if denoiser is not None:
            denoised = {name: self.restore(denoiser, released.splits[name].images) for name in test_splits}
        parts: dict[str, AttackOutcome] = {}
        with cpu_threads(attack.config.threads):
            for attr in attack.attributes_for(clean.dataset, ctx):
                reference = attack.clean_classifier(attr, clean, test_splits, ctx)
                raw = attack.hits(reference.model, attack.test_set(released.splits, attr, test_splits), ctx)
                hits = raw if denoised is None else attack.hits(
                    reference.model, attack.test_set(released.splits, attr, test_splits, denoised), ctx)
                parts[attr] = reference.outcome(attr, float(hits.float().mean()), hits,
                                                **{f"acc_raw_{attr}": float(raw.float().mean())})
        pick = {name: _spread(len(clean[name]), QUALITY_IMAGES // len(test_splits)) for name in test_splits}
        raw_images = torch.cat([released.splits[name].images[pick[name]] for name in test_splits])
        clean_images = torch.cat([clean[name].images[pick[name]] for name in test_splits])
        denoised_images = None if denoised is None else torch.cat([denoised[name][pick[name]] for name in test_splits])
        return parts, Attacked(raw_images, denoised_images, clean_images)


def _spread(count: int, most: int) -> torch.Tensor:
    """Returns up to ``most`` indices spread evenly over ``count`` images (all of them if fewer)."""
    if count <= most:
        return torch.arange(count)
    return torch.linspace(0, count - 1, most).round().long()


def _check_targets(names: tuple[str, ...]) -> None:
    """Raises BenchError for a target other than ``identity`` and ``attributes``."""
    unknown = set(names) - set(TARGETS)
    if unknown:
        raise BenchError(f"attack 'denoise': unknown target {sorted(unknown)[0]!r} (use {', '.join(TARGETS)})")
