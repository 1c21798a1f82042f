"""Face re-identification adversaries (privacy-enhanced few-shot paper, Sec. V).

``face_reid`` (non-adaptive) trains a face embedder on clean images of its own identities
(the training split), enrols the target identities (the evaluated split) with an SVC on
their clean images and identifies released images of the same identities.

``face_reid_adapted`` knows the mechanism: it runs it, with its own random streams, over
its training images and over its clean enrolment images of the targets, trains (or
fine-tunes) the embedder and enrols on those, and identifies the released probes, so that
embedder and enrolment see what the probes look like (SEBA's strongest setting). Its clean
reference is the same pipeline without a mechanism, i.e. ``face_reid``'s ``top1_clean``.

Top-1 accuracy on released probes is compared with chance (1 / identities) and with the
same attack on clean probes; ``trials`` is the number of probes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import torch

from attacks._reid_pipeline import (
    AdaptedTraining,
    FaceIdentifier,
    MODEL_VERSION,
    FaceReidConfig,
    adapted_embedder,
    clean_reference,
    find_targets,
    known_mechanism,
)
from bench.config import deep_merge, load_preset, setting
from bench.datasets.base import DataShape, Splits
from bench.errors import BenchError
from bench.interfaces import Attack, AttackOutcome, Release, RunContext
from bench.registry import register_attack
from bench.release import apply_to_split

__all__ = ["AdaptedConfig", "FaceReid", "FaceReidAdapted", "FaceReidConfig"]


@register_attack("face_reid")
class FaceReid(Attack):
    """FaceNet-style embedding + SVC re-identification of released faces."""

    metrics: ClassVar[dict[str, bool]] = {"top1": True, "top1_clean": True, "chance": True}
    primary: ClassVar[str] = "top1"
    description = "embedding network trained on clean faces + SVC enrolled on clean images; top-1 on released probes"
    validation: ClassVar[bool] = True
    config_class: ClassVar[type] = FaceReidConfig
    version: ClassVar[int] = MODEL_VERSION

    def config_dict(self) -> dict[str, Any]:
        """Returns the resolved profile settings."""
        return asdict(self.config)

    def check_data(self, shape: DataShape | None, eval_split: str = "test") -> None:
        """Checks that at least two target identities have images left to probe after enrolment.

        Raises:
            BenchError: Fewer than two identities of the evaluated split have more than
                ``enrol_per_id`` images.
        """
        if shape is None or eval_split not in shape:
            return
        if shape[eval_split].classes_with(self.config.enrol_per_id + 1) < 2:
            most = max(shape[eval_split].counts, default=0)
            raise BenchError(f"attack {self.name!r}: fewer than 2 identities of split {eval_split!r} have more than "
                             f"enrol_per_id={self.config.enrol_per_id} images (the most any has is {most}); "
                             f"set {self.name}.enrol_per_id lower")

    def run(self, clean: Splits, released: Release, ctx: RunContext) -> AttackOutcome:
        """Trains (or reuses) the clean embedder, enrols clean images, identifies released probes."""
        targets = find_targets(clean, self.config, ctx, f"attack {self.name!r}")
        identifier, clean_hits = clean_reference(self.config, clean, targets, ctx)
        hits = identifier.hits(released.splits[targets.split].images[targets.probe], targets.probe_labels())
        top1, top1_clean = float(hits.mean()), float(clean_hits.mean())
        metrics = {"top1": top1, "top1_clean": top1_clean, "chance": targets.chance, **targets.counts()}
        return AttackOutcome(metrics=metrics, value=top1, clean=top1_clean, chance=targets.chance,
                             trials=len(targets.probe), groups=targets.groups(hits, clean_hits))


@dataclass(frozen=True)
class AdaptedConfig(FaceReidConfig):
    """face_reid's settings plus how the embedder adapts (``attacks/presets/face_reid_adapted.yaml``).

    Attributes:
        adapt_from: ``clean``: fine-tune the clean embedder on released images (the
            adversary has it anyway); ``scratch``: train a new one on them.
        adapt_epochs: Passes over the adversary's released training images.
        threads: CPU threads while the embedder adapts (None: torch's setting); the
            mechanism itself runs with torch's setting, as in the release.
    """

    adapt_from: str = setting("clean", choices=("clean", "scratch"))
    adapt_epochs: int = setting(3, low=1)
    threads: int | None = setting(None, low=1)


@register_attack("face_reid_adapted")
class FaceReidAdapted(FaceReid):
    """face_reid with embedder and enrolment trained on the adversary's own released images."""

    description = ("embedder trained and targets enrolled on the adversary's own images after the mechanism "
                   "(own random streams); top-1 on released probes")
    config_class: ClassVar[type] = AdaptedConfig

    def settings(self) -> dict[str, Any]:
        """Returns face_reid's preset, updated by this attack's preset and overrides."""
        values = deep_merge(load_preset("attacks", "face_reid", self.profile),
                            load_preset("attacks", self.name, self.profile))
        values.update(self.overrides)
        return values

    def run(self, clean: Splits, released: Release, ctx: RunContext) -> AttackOutcome:
        """Adapts the embedder and enrolment to the mechanism, identifies released probes."""
        cfg: AdaptedConfig = self.config
        owner = f"attack {self.name!r}"
        targets = find_targets(clean, cfg, ctx, owner)
        clean_identifier, clean_hits = clean_reference(cfg, clean, targets, ctx)
        top1_clean = float(clean_hits.mean())
        probes, truth = released.splits[targets.split].images[targets.probe], targets.probe_labels()
        if released.is_clean:
            hits, unadapted, adapted = clean_identifier.hits(probes, truth), None, 0.0
        else:
            mechanism = known_mechanism(released, owner)
            own = clean[cfg.train_split]
            purpose = f"{self.name}/{cfg.train_split}"

            def own_released() -> torch.Tensor:
                ctx.log(f"{self.name}: applying {released.mechanism} to the adversary's {len(own)} own images")
                return apply_to_split(mechanism, own, ctx, purpose)[0]

            enrol_released, _ = apply_to_split(mechanism, targets.enrol_set(), ctx, f"{self.name}/enrol")
            start = clean_identifier.model if cfg.adapt_from == "clean" else None
            model = adapted_embedder(cfg, own_released, own.labels, (released.key, purpose), ctx,
                                     AdaptedTraining(cfg.adapt_epochs, start, cfg.threads))
            identifier = FaceIdentifier(model, enrol_released, targets.images.labels[targets.enrol], cfg, ctx)
            hits, unadapted, adapted = identifier.hits(probes, truth), clean_identifier.top1(probes, truth), 1.0
        top1 = float(hits.mean())
        metrics = {"top1": top1, "top1_clean": top1_clean, "chance": targets.chance, **targets.counts(),
                   "adapted": adapted, "top1_unadapted": top1 if unadapted is None else unadapted}
        return AttackOutcome(metrics=metrics, value=top1, clean=top1_clean, chance=targets.chance,
                             trials=len(targets.probe), groups=targets.groups(hits, clean_hits))
