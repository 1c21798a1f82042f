"""Face re-identification adversary (privacy-enhanced few-shot paper, Sec. V).

The adversary trains a face embedder on clean images of its own identities (the training
split), enrols the target identities with an SVC on their clean images, and identifies
released images of the same identities. Top-1 accuracy on released probes is compared with
chance (1 / identities) and with the same attack on clean probes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from bench.config import build_config
from bench.datasets.base import ImageSet, Splits
from bench.interfaces import Attack, AttackOutcome, Release, RunContext
from bench.modelcache import cached_model
from bench.nn.classify import ClassifierTraining, train_classifier
from bench.nn.face_cnn import build_face_model
from bench.nn.images import to_input
from bench.registry import register_attack
from bench.seeding import derive_seed, make_generator

MODEL_VERSION = 1


@dataclass(frozen=True)
class FaceReidConfig:
    """Settings of one face_reid profile (see ``attacks/presets/face_reid.yaml``)."""

    model: str = "small_cnn"
    weights: str | None = None
    width: int = 32
    input_size: int = 48
    epochs: int = 8
    batch_size: int = 64
    lr: float = 2e-3
    train_split: str = "train"
    target_split: str = "test"
    enrol_per_id: int = 13
    max_ids: int | None = None
    svc_c: float = 1.0

    def training_part(self) -> dict[str, Any]:
        """Returns the settings the embedder's weights depend on."""
        keep = {"model", "weights", "width", "input_size", "epochs", "batch_size", "lr", "train_split"}
        return {k: v for k, v in asdict(self).items() if k in keep}


@register_attack("face_reid")
class FaceReid(Attack):
    """FaceNet-style embedding + SVC re-identification of released faces."""

    metrics: ClassVar[dict[str, bool]] = {"top1": True, "top1_clean": True, "chance": True}
    primary: ClassVar[str] = "top1"
    description = "embedding network trained on clean faces + SVC enrolled on clean images; top-1 on released probes"

    def __init__(self, profile: str = "quick", overrides: dict[str, Any] | None = None):
        super().__init__(profile, overrides)
        values = self.settings()
        self.config: FaceReidConfig = build_config(FaceReidConfig, values, "attack 'face_reid'")

    def config_dict(self) -> dict[str, Any]:
        """Returns the resolved profile settings."""
        return asdict(self.config)

    def run(self, clean: Splits, released: Release, ctx: RunContext) -> AttackOutcome:
        """Trains (or reuses) the embedder, enrols clean images, identifies released probes."""
        cfg = self.config
        model = self._embedder(clean, ctx)
        enrol, probe = self._enrolment(clean[cfg.target_split], ctx.seed)
        target_clean = clean[cfg.target_split]
        target_released = released.splits[cfg.target_split]
        from sklearn.svm import SVC

        svc = SVC(kernel="linear", C=cfg.svc_c)
        svc.fit(self._embed(model, target_clean.images[enrol], ctx), target_clean.labels[enrol].numpy())
        truth = target_clean.labels[probe].numpy()
        top1_clean = float(np.mean(svc.predict(self._embed(model, target_clean.images[probe], ctx)) == truth))
        top1 = float(np.mean(svc.predict(self._embed(model, target_released.images[probe], ctx)) == truth))
        n_ids = int(torch.unique(target_clean.labels[enrol]).numel())
        chance = 1.0 / n_ids
        metrics = {"top1": top1, "top1_clean": top1_clean, "chance": chance,
                   "identities": float(n_ids), "probes": float(len(probe))}
        return AttackOutcome(metrics=metrics, value=top1, clean=top1_clean, chance=chance)

    def _enrolment(self, target: ImageSet, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Splits each target identity's images into enrolment and probe indices."""
        cfg = self.config
        g = make_generator(seed, "face_reid", "enrolment")
        ids = torch.unique(target.labels)
        if cfg.max_ids is not None and len(ids) > cfg.max_ids:
            ids = ids[torch.randperm(len(ids), generator=g)[: cfg.max_ids]].sort().values
        enrol, probe = [], []
        for identity in ids.tolist():
            members = (target.labels == identity).nonzero().flatten()
            members = members[torch.randperm(len(members), generator=g)]
            if len(members) <= cfg.enrol_per_id:
                continue
            enrol.append(members[: cfg.enrol_per_id])
            probe.append(members[cfg.enrol_per_id :])
        if not enrol:
            from bench.errors import BenchError

            raise BenchError(f"face_reid: no target identity has more than {cfg.enrol_per_id} images")
        return torch.cat(enrol), torch.cat(probe)

    @torch.no_grad()
    def _embed(self, model: torch.nn.Module, images: torch.Tensor, ctx: RunContext, batch: int = 256) -> np.ndarray:
        model.eval()
        parts = [model.embed(to_input(images[i : i + batch], self.config.input_size, ctx.device)).cpu()
                 for i in range(0, len(images), batch)]
        return torch.cat(parts).numpy()

    def _embedder(self, clean: Splits, ctx: RunContext) -> torch.nn.Module:
        cfg = self.config
        weights = ctx.options.get("face_reid.weights", cfg.weights)
        train = clean[cfg.train_split]
        labels, classes = torch.unique(train.labels, return_inverse=True)
        key = ("face_reid-model", MODEL_VERSION, clean.fingerprint, cfg.training_part(), weights, ctx.seed,
               str(ctx.device.type))

        def build() -> torch.nn.Module:
            torch.manual_seed(derive_seed(ctx.seed, "face_reid", "init"))
            return build_face_model(cfg.model, len(labels), weights, cfg.width).to(ctx.device)

        def train_fn(model: torch.nn.Module) -> dict[str, Any]:
            ctx.log(f"training the face_reid embedder ({cfg.model}, {len(labels)} identities)")
            spec = ClassifierTraining(
                epochs=cfg.epochs, batch_size=cfg.batch_size, lr=cfg.lr, weight_decay=5e-4,
                input_size=cfg.input_size, augment=augment, label_smoothing=0.1, desc="face_reid epochs",
            )
            return train_classifier(model, train.images, classes, spec, ctx, derive_seed(ctx.seed, "face_reid", "train"))

        model, _ = cached_model(ctx.cache_dir, key, build, train_fn, ctx.log)
        return model.to(ctx.device)


def augment(x: torch.Tensor, generator: torch.Generator, shift: int = 4) -> torch.Tensor:
    """Random horizontal flips and translations of up to ``shift`` pixels (reflect-padded)."""
    n = x.shape[0]
    flip = torch.rand(n, generator=generator) < 0.5
    x = torch.where(flip.to(x.device)[:, None, None, None], x.flip(3), x)
    padded = F.pad(x, (shift,) * 4, mode="reflect")
    dx = torch.randint(0, 2 * shift + 1, (n,), generator=generator)
    dy = torch.randint(0, 2 * shift + 1, (n,), generator=generator)
    h, w = x.shape[-2:]
    rows = (dy[:, None] + torch.arange(h)[None]).to(x.device)
    cols = (dx[:, None] + torch.arange(w)[None]).to(x.device)
    batch = torch.arange(n, device=x.device)[:, None, None]
    return padded.permute(0, 2, 3, 1)[batch, rows[:, :, None], cols[:, None, :]].permute(0, 3, 1, 2)


