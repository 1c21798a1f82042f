"""Pretrained face re-identification adversaries: the attacker the field uses.

The few-shot privacy paper attacks with FaceNet pretrained on VGGFace2; face
de-identification benchmarks score privacy against pretrained recognizers and report
verification rates. These adversaries train nothing on the benchmark's data
(:mod:`attacks._pretrained_pipeline`, :mod:`bench.recognizers`):

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
references, and how many probes were aligned on a detected face or centred as a crop. With
several backends (``--set face_reid_pretrained.backends=dlib,onnx``) similarities are fused
per probe and each backend's own top-1 is reported too. On synthetic faces a real
recognizer may not beat chance on clean probes: the score is then undefined ("attack too
weak"), never a protection.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

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
from attacks._reid_pipeline import Targets, find_targets, known_mechanism
from attacks.denoise import Denoise
from attacks.face_reid import FaceReid
from bench.cells import content_key
from bench.datasets.base import DataShape, Splits
from bench.interfaces import Attack, AttackOutcome, Release, RunContext
from bench.registry import register_attack
from bench.release import apply_to_split

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
        """Enrols clean gallery images and identifies released probes."""
        targets = find_targets(clean, self.config, ctx, f"attack {self.name!r}")
        reference = clean_embeddings(self.config, targets, clean.fingerprint, ctx)
        gallery = self.gallery(reference, targets, released, ctx)
        probes = self.probes(reference, targets, clean, released, ctx)
        return self.outcome(targets, reference, gallery, probes)

    def gallery(self, reference: Embedded, targets: Targets, released: Release, ctx: RunContext) -> Embedded:
        """Returns the enrolment embeddings: clean ones (the adapted variant overrides this)."""
        return pick(reference, targets.enrol)

    def probes(self, reference: Embedded, targets: Targets, clean: Splits, released: Release,
               ctx: RunContext) -> Embedded:
        """Returns the embeddings of the released probes (cached per release)."""
        if released.is_clean:
            return pick(reference, targets.probe)
        images = released.splits[targets.split].images[targets.probe]
        key = ("released", released.key, targets.split, content_key(targets.probe.tolist()))
        return embed(self.config, images, ctx, key, "released probe", reference.box)

    def outcome(self, targets: Targets, reference: Embedded, gallery: Embedded, probes: Embedded) -> AttackOutcome:
        """Identifies probes and clean probes; returns the outcome with its clean reference."""
        labels = targets.images.labels[targets.enrol].numpy()
        truth = targets.probe_labels()
        clean_probes = pick(reference, targets.probe)
        clean_gallery = pick(reference, targets.enrol)
        attacked = identify(gallery, labels, probes, truth)
        baseline = identify(clean_gallery, labels, clean_probes, truth, suffix="_clean")
        metrics = {**attacked.metrics, **baseline.metrics, "chance": targets.chance, **targets.counts(),
                   **probes.counts("probes_aligned"), **clean_gallery.counts("gallery_aligned")}
        return AttackOutcome(metrics=metrics, value=attacked.metrics["top1"], clean=baseline.metrics["top1_clean"],
                             chance=targets.chance, trials=len(targets.probe),
                             groups=targets.groups(attacked.hits, baseline.hits))


@register_attack("face_reid_pretrained_adapted")
class FaceReidPretrainedAdapted(FaceReidPretrained):
    """The pretrained recognizer enrolled on released gallery images the adversary made with the known mechanism."""

    description = ("pretrained face recognizer enrolled on gallery images the adversary released itself (known "
                   "mechanism, own random streams); top-1 and TAR@FAR on released probes")

    def gallery(self, reference: Embedded, targets: Targets, released: Release, ctx: RunContext) -> Embedded:
        """Returns embeddings of the enrolment images after the mechanism (the adversary's own streams)."""
        if released.is_clean:
            return pick(reference, targets.enrol)
        mechanism = known_mechanism(released, f"attack {self.name!r}")
        purpose = f"{self.name}/enrol"
        own, _ = apply_to_split(mechanism, targets.enrol_set(), ctx, purpose)
        key = ("adapted-gallery", released.key, purpose, targets.split, content_key(targets.enrol.tolist()))
        return embed(self.config, own, ctx, key, "adversary-released gallery", reference.box)


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

    def probes(self, reference: Embedded, targets: Targets, clean: Splits, released: Release,
               ctx: RunContext) -> Embedded:
        """Returns embeddings of the released probes after the DnCNN restored them."""
        if released.is_clean:
            return pick(reference, targets.probe)
        restorer = Denoise(self.profile, self.config.denoise)
        model = restorer.denoiser(clean, released, ctx)
        restored = restorer.restore(model, released.splits[targets.split].images[targets.probe])
        key = ("restored", released.key, restorer.config.training_part(), targets.split,
               content_key(targets.probe.tolist()))
        return embed(self.config, restored, ctx, key, "restored probe", reference.box)
