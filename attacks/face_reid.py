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
same attack on clean probes; ``trials`` is the number of probes. On a small dataset both run
in folds over all its identities (:mod:`attacks._targets`), each fold's embedder trained on
identities disjoint from its targets, and the folds' probes are pooled.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from attacks._reid_pipeline import (
    MODEL_VERSION,
    AdaptedTraining,
    FaceIdentifier,
    FaceReidConfig,
    Fold,
    adapted_embedder,
    clean_reference,
    find_folds,
    known_mechanism,
    pooled_outcome,
)
from bench.core.config import deep_merge, load_preset, setting
from bench.core.interfaces import Attack, AttackOutcome, Release, RunContext
from bench.core.registry import register_attack
from bench.data.base import DataShape, Splits
from bench.errors import BenchError
from bench.release.dataset import apply_to_split

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
        """Trains (or reuses) the clean embedder, enrols clean images, identifies released probes (per fold)."""
        folds = find_folds(clean, self.config, ctx, f"attack {self.name!r}")
        hits, clean_hits = [], []
        for fold in folds:
            identifier, fold_clean_hits = clean_reference(self.config, clean, fold, ctx)
            hits.append(identifier.hits(fold.targets.released_probes(released), fold.targets.probe_labels()))
            clean_hits.append(fold_clean_hits)
        return pooled_outcome(folds, hits, clean_hits)


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
        """Adapts the embedder and enrolment to the mechanism, identifies released probes (per fold)."""
        folds = find_folds(clean, self.config, ctx, f"attack {self.name!r}")
        hits, clean_hits, unadapted = [], [], []
        for fold in folds:
            fold_hits, fold_clean_hits, fold_unadapted = self._fold(fold, clean, released, ctx)
            hits.append(fold_hits)
            clean_hits.append(fold_clean_hits)
            unadapted.append(fold_unadapted)
        top1_unadapted = float(np.concatenate(unadapted).mean())
        return pooled_outcome(folds, hits, clean_hits, adapted=float(not released.is_clean),
                              top1_unadapted=top1_unadapted)

    def _fold(self, fold: Fold, clean: Splits, released: Release,
              ctx: RunContext) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Returns one fold's hits on released probes, on clean probes, and of the unadapted pipeline."""
        cfg: AdaptedConfig = self.config
        targets = fold.targets
        clean_identifier, clean_hits = clean_reference(cfg, clean, fold, ctx)
        probes, truth = targets.released_probes(released), targets.probe_labels()
        unadapted = clean_identifier.hits(probes, truth)
        if released.is_clean:
            return unadapted, clean_hits, unadapted
        mechanism = known_mechanism(released, f"attack {self.name!r}")
        own = fold.own
        purpose = f"{self.name}/{cfg.train_split}{fold.suffix}"

        def own_released() -> torch.Tensor:
            ctx.log(f"{self.name}: applying {released.mechanism} to the adversary's {len(own)} own images")
            return apply_to_split(mechanism, own, ctx, purpose)[0]

        enrol_released, _ = apply_to_split(mechanism, targets.enrol_set(), ctx, f"{self.name}/enrol{fold.suffix}")
        start = clean_identifier.model if cfg.adapt_from == "clean" else None
        data_key = (released.key, purpose, *((fold.key,) if fold.key else ()))
        model = adapted_embedder(cfg, own_released, own.labels, data_key, ctx,
                                 AdaptedTraining(cfg.adapt_epochs, start, cfg.threads))
        identifier = FaceIdentifier(model, enrol_released, targets.images.labels[targets.enrol], cfg, ctx)
        return identifier.hits(probes, truth), clean_hits, unadapted
