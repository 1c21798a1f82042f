"""Pretrained face re-identification adversaries: the attacker the field uses.

The few-shot privacy paper attacks with FaceNet pretrained on VGGFace2; face
de-identification benchmarks score privacy against pretrained recognizers and report
verification rates. These adversaries train nothing on the benchmark's data
(:mod:`attacks._pretrained_pipeline`, :mod:`bench.faces.recognizers`):

- ``face_reid_pretrained``: enrols clean gallery images of the target identities and
  identifies released probes;
- ``face_reid_pretrained_adapted``: enrols released gallery images instead, made by the
  adversary running the known mechanism with its own random streams, so gallery and
  probes look alike;
- ``face_reid_pretrained_restored``: first restores the probes with the ``denoise``
  adversary's DnCNN (trained on the adversary's own (mechanism(x), x) pairs; the same cached
  model), then identifies them against the clean gallery, as published attacks on blurred
  faces restore and then match.

Each reports top-1 on released probes against chance (1 / identities) and against the same
attack on clean probes (``top1_clean``), TAR at FAR 1e-3 and 1e-2 with their clean
references, and how many probes and gallery images each method of the detection chain aligned
(``<method>_aligned_probes``, ``<method>_aligned_gallery_images`` for ``mtcnn``, ``dlib_hog``,
``clean`` and ``box``: :mod:`bench.faces.chain`; ``clean``, the clean image's face, only with
``clean_geometry=true``, which hands the adversary where each clean probe's face is). With
several backends (``--set face_reid_pretrained.backends=dlib,onnx``) similarities are fused
per probe and each backend's own top-1 is reported too. On synthetic faces a real
recognizer may not beat chance on clean probes: the score is then undefined ("attack too
weak"), never a protection.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import numpy as np

from attacks._pretrained_pipeline import (
    PIPELINE_VERSION,
    Embedded,
    PretrainedConfig,
    clean_embeddings,
    embed,
    identify,
    pick,
    recognizers,
)
from attacks._reid_pipeline import Fold, find_folds, known_mechanism, pooled_targets
from attacks.denoise import Denoise
from attacks.face_reid import FaceReid
from bench.core.interfaces import Attack, AttackOutcome, Release, RunContext
from bench.core.keys import content_key
from bench.core.registry import register_attack
from bench.data.base import DataShape, Splits
from bench.release.dataset import apply_to_split

__all__ = ["FaceReidPretrained", "FaceReidPretrainedAdapted", "FaceReidPretrainedRestored", "RestoredConfig"]


@register_attack("face_reid_pretrained")
class FaceReidPretrained(Attack):
    """A pretrained recognizer (dlib's ResNet by default) enrolled on clean images; top-1 on released probes."""

    metrics: ClassVar[dict[str, bool]] = {"top1": True, "top1_clean": True, "chance": True,
                                          "tar_far1e-3": True, "tar_far1e-2": True}
    primary: ClassVar[str] = "top1"
    description = ("pretrained face recognizer (dlib ResNet; FaceNet or ONNX ArcFace from local weights), no "
                   "training on the benchmark: clean enrolment, top-1 and TAR@FAR on released probes")
    validation: ClassVar[bool] = True
    config_class: ClassVar[type] = PretrainedConfig
    version: ClassVar[int] = PIPELINE_VERSION
    preset_name: ClassVar[str] = "face_reid_pretrained"

    def config_dict(self) -> dict[str, Any]:
        """Returns the resolved settings."""
        return asdict(self.config)

    def check_data(self, shape: DataShape | None, eval_split: str = "test") -> None:
        """Checks, before any work, that the recognizers load and two target identities have probes left.

        Raises:
            BenchError: A missing package or weights file, or too few images per identity.
        """
        recognizers(self.config)
        FaceReid.check_data(self, shape, eval_split)

    def run(self, clean: Splits, released: Release, ctx: RunContext) -> AttackOutcome:
        """Enrols clean gallery images and identifies released probes (per fold, pooled)."""
        folds = find_folds(clean, self.config, ctx, f"attack {self.name!r}")
        reference = clean_embeddings(self.config, folds[0].targets, clean.fingerprint, ctx)
        results = [self.identified(fold, reference, clean, released, ctx) for fold in folds]
        return self.outcome(folds, results)

    def identified(self, fold: Fold, reference: Embedded, clean: Splits, released: Release,
                   ctx: RunContext) -> dict[str, Any]:
        """Returns one fold's identification of released and of clean probes, with its alignment counts."""
        targets = fold.targets
        gallery = self.gallery(reference, fold, released, ctx)
        probes = self.probes(reference, fold, clean, released, ctx)
        labels = targets.images.labels[targets.enrol].numpy()
        truth = targets.probe_labels()
        clean_gallery = pick(reference, targets.enrol)
        return {"attacked": identify(gallery, labels, probes, truth),
                "baseline": identify(clean_gallery, labels, pick(reference, targets.probe), truth, suffix="_clean"),
                "counts": {**probes.counts("probes"), **gallery.counts("gallery_images")}}

    def gallery(self, reference: Embedded, fold: Fold, released: Release, ctx: RunContext) -> Embedded:
        """Returns the enrolment embeddings: clean ones (the adapted variant overrides this)."""
        return pick(reference, fold.targets.enrol)

    def probes(self, reference: Embedded, fold: Fold, clean: Splits, released: Release,
               ctx: RunContext) -> Embedded:
        """Returns the embeddings of the released probes (cached per release)."""
        targets = fold.targets
        if released.is_clean:
            return pick(reference, targets.probe)
        images = targets.released_probes(released)
        key = ("released", released.key, targets.split, content_key(targets.probe.tolist()))
        return embed(self.config, images, ctx, key, "released probe", reference.box,
                     reference.located.subset(targets.probe))

    def outcome(self, folds: list[Fold], results: list[dict[str, Any]]) -> AttackOutcome:
        """Returns the outcome pooled over folds: hits summed, other metrics probe-weighted, counts summed."""
        targets = pooled_targets(folds)
        weights = [len(fold.targets.probe) for fold in folds]
        metrics = {**_pooled([r["attacked"].metrics for r in results], weights),
                   **_pooled([r["baseline"].metrics for r in results], weights),
                   "chance": targets.chance, **targets.counts(),
                   **{name: float(sum(r["counts"][name] for r in results)) for name in results[0]["counts"]}}
        hits = np.concatenate([r["attacked"].hits for r in results])
        clean_hits = np.concatenate([r["baseline"].hits for r in results])
        metrics["top1"], metrics["top1_clean"] = float(hits.mean()), float(clean_hits.mean())
        return AttackOutcome(metrics=metrics, value=metrics["top1"], clean=metrics["top1_clean"],
                             chance=targets.chance, trials=len(targets.probe), groups=targets.groups(hits, clean_hits))


def _pooled(metrics: list[dict[str, float]], weights: list[int]) -> dict[str, float]:
    """Returns each metric's weighted mean over folds (the folds' probe counts)."""
    if len(metrics) == 1:
        return dict(metrics[0])
    return {name: float(np.average([m[name] for m in metrics], weights=weights)) for name in metrics[0]}


@register_attack("face_reid_pretrained_adapted")
class FaceReidPretrainedAdapted(FaceReidPretrained):
    """The pretrained recognizer enrolled on released gallery images the adversary made with the known mechanism."""

    description = ("pretrained face recognizer enrolled on gallery images the adversary released itself (known "
                   "mechanism, own random streams); top-1 and TAR@FAR on released probes")

    def gallery(self, reference: Embedded, fold: Fold, released: Release, ctx: RunContext) -> Embedded:
        """Returns embeddings of the enrolment images after the mechanism (the adversary's own streams)."""
        targets = fold.targets
        if released.is_clean:
            return pick(reference, targets.enrol)
        mechanism = known_mechanism(released, f"attack {self.name!r}")
        purpose = f"{self.name}/enrol{fold.suffix}"
        own, _ = apply_to_split(mechanism, targets.enrol_set(), ctx, purpose)
        key = ("adapted-gallery", released.key, purpose, targets.split, content_key(targets.enrol.tolist()))
        return embed(self.config, own, ctx, key, "adversary-released gallery", reference.box,
                     reference.located.subset(targets.enrol))


@dataclass(frozen=True)
class RestoredConfig(PretrainedConfig):
    """The pretrained pipeline's settings plus the restoring DnCNN's (``denoise``'s preset, updated by ``denoise``).

    Attributes:
        denoise: Settings of the ``denoise`` adversary's DnCNN that differ from its preset
            (none by default, so its cached model is shared).
    """

    denoise: dict = field(default_factory=dict)


@register_attack("face_reid_pretrained_restored")
class FaceReidPretrainedRestored(FaceReidPretrained):
    """Released probes restored by the denoise adversary's DnCNN, then identified by the pretrained recognizer."""

    description = ("released probes restored by a DnCNN trained on the adversary's own (mechanism(x), x) pairs, "
                   "then the pretrained recognizer with clean enrolment; top-1 and TAR@FAR")
    config_class: ClassVar[type] = RestoredConfig
    version: ClassVar[tuple[int, ...]] = (PIPELINE_VERSION, *Denoise.version)  # type: ignore[assignment]

    def check_data(self, shape: DataShape | None, eval_split: str = "test") -> None:
        """Checks the recognizers, the enrolment and, before any work, the DnCNN's settings (``denoise.*``)."""
        super().check_data(shape, eval_split)
        Denoise(self.profile, self.config.denoise)

    def probes(self, reference: Embedded, fold: Fold, clean: Splits, released: Release,
               ctx: RunContext) -> Embedded:
        """Returns embeddings of the released probes restored by the DnCNN (trained on the fold's own identities)."""
        targets = fold.targets
        if released.is_clean:
            return pick(reference, targets.probe)
        restorer = Denoise(self.profile, self.config.denoise)
        model = restorer.denoiser(clean, released, ctx, fold)
        restored = restorer.restore(model, targets.released_probes(released))
        key = ("restored", released.key, restorer.config.training_part(), targets.split,
               content_key(targets.probe.tolist()), *((fold.key,) if fold.key else ()))
        return embed(self.config, restored, ctx, key, "restored probe", reference.box,
                     reference.located.subset(targets.probe))
