"""Identity linkage of released pedestrians: cross-camera re-identification by an adversary.

Threat model. The adversary obtains the release's training split together with its
identity labels (who is who in each released training image: the release the reID task
trains on carries them) and trains a reID network on those released images. It holds its
own *clean* gallery of other people, taken by its cameras (the evaluated gallery split,
identity-disjoint from the released training people, as in the reID protocol), and wants
to learn who each released query image shows: it ranks its clean gallery for every released
query. A query is linked where an image of its person taken by another camera ranks first;
gallery images of the query's person taken by the query's own camera are left out, junk
images are ignored and distractors count as wrong, as :func:`tasks.reid_metrics.evaluate_rank`
does. The adversary needs no attribute labels, so it measures privacy on any reID data.

Metrics: ``top1`` (the primary metric: the fraction of queries whose first-ranked gallery
image is their person from another camera) and ``map`` on the release; ``top1_clean`` and
``map_clean``, the same attack when nothing is released but clean images (a network trained
on clean training images ranking clean queries); ``chance`` and ``chance_map``, the expected
top-1 and mAP of a ranking that ignores the images, exactly (no sampling). ``queries`` counts
the queries with a cross-camera match, the trials of the privacy score's significance test.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from bench.core.config import setting
from bench.core.interfaces import Attack, AttackOutcome, Release, RunContext
from bench.core.registry import register_attack
from bench.data.base import DataShape, ImageSet, Splits
from bench.errors import BenchError
from bench.nn.images import embed_images
from bench.nn.resnet import ARCHS, ReidNet, check_weights
from bench.nn.threads import cpu_threads
from bench.randomness.seeding import derive_seed
from bench.storage.modelcache import cached_model
from tasks.reid import ReidConfig, train_reid
from tasks.reid_metrics import evaluate_rank, matched_queries, query_average_precision, random_ranking

MODEL_VERSION = 1


@dataclass(frozen=True)
class LinkageConfig:
    """Settings of the identity-linkage adversary (``attacks/presets/identity_linkage.yaml``).

    Attributes:
        arch: ResNet backbone of its reID network (ResNet + BNNeck, as the reID task's).
        weights: Local ImageNet weights of the backbone, or None to train from scratch.
        input_size: Network input (h, w); images are resized to it.
        p: Identities per PK batch.
        k: Images per identity in a batch.
        epochs: Passes of the PK sampler over the released training images.
        lr: Adam learning rate after warm-up.
        weight_decay: Adam weight decay.
        warmup_epochs: Linear warm-up from lr / 10.
        lr_steps: Epochs at which the learning rate is multiplied by ``lr_gamma``.
        lr_gamma: Step decay factor.
        label_smoothing: Of the identity cross-entropy.
        margin: Batch-hard triplet margin (None: soft margin).
        pad: Zero-padding of the random-crop augmentation, in input pixels.
        erasing: Random-erasing probability.
        train_split: The released split it trains on (with its identity labels).
        query_split: The released split whose people it links.
        gallery_split: Its clean gallery (identity-disjoint from ``train_split``).
        threads: CPU threads while training and embedding (None: torch's setting).
    """

    arch: str = setting("resnet18", choices=ARCHS)
    weights: str | None = setting(None, path=True)
    input_size: tuple = setting((64, 32), low=16, high=1024)
    p: int = setting(8, low=2)
    k: int = setting(4, low=2)
    epochs: int = setting(10, low=1)
    lr: float = setting(3.5e-4, low=0, low_open=True, high=10)
    weight_decay: float = setting(5e-4, low=0)
    warmup_epochs: int = setting(0, low=0)
    lr_steps: tuple = setting((), low=0)
    lr_gamma: float = setting(0.1, low=0, low_open=True, high=1)
    label_smoothing: float = setting(0.1, low=0, high=1)
    margin: float | None = setting(0.3, low=0)
    pad: int = setting(4, low=0)
    erasing: float = setting(0.0, low=0, high=1)
    train_split: str = "train"
    query_split: str = "query"
    gallery_split: str = "gallery"
    threads: int | None = setting(None, low=1)

    def reid_config(self) -> ReidConfig:
        """Returns the reID task's training settings that train this adversary's network."""
        shared = ("arch", "weights", "input_size", "p", "k", "epochs", "lr", "weight_decay", "warmup_epochs",
                  "lr_steps", "lr_gamma", "label_smoothing", "margin", "pad", "erasing", "threads")
        return ReidConfig(last_stride=1, **{name: getattr(self, name) for name in shared})

    def training_part(self) -> dict[str, Any]:
        """Returns the settings the network's weights depend on."""
        return {k: v for k, v in asdict(self).items() if k not in {"query_split", "gallery_split", "threads"}}


@register_attack("identity_linkage")
class IdentityLinkage(Attack):
    """A reID network trained on released, identity-labelled images links released queries to a clean gallery."""

    metrics: ClassVar[dict[str, bool]] = {
        "top1": True, "top1_clean": True, "chance": True, "map": True, "map_clean": True, "chance_map": True,
    }
    primary: ClassVar[str] = "top1"
    description = ("reID network trained on the released training people (identities known) ranks a clean gallery of "
                   "other cameras for each released query; top-1 and mAP vs a random ranking")
    config_class: ClassVar[type] = LinkageConfig
    version: ClassVar[int] = MODEL_VERSION
    config: LinkageConfig

    def __init__(self, profile: str = "quick", overrides: dict[str, Any] | None = None):
        super().__init__(profile, overrides)
        check_weights(self.config.weights, self.owner)

    def config_dict(self) -> dict[str, Any]:
        """Returns the resolved profile settings."""
        return asdict(self.config)

    def check_data(self, shape: DataShape | None, eval_split: str = "test") -> None:
        """Checks that the data has the adversary's splits, enough training people and cross-camera matches.

        Raises:
            BenchError: A split is missing, the training split has fewer identities than
                ``p`` (the message names ``identity_linkage.p``), or no query has a gallery
                image of its person from another camera.
        """
        if shape is None:
            return
        cfg = self.config
        missing = [s for s in (cfg.train_split, cfg.query_split, cfg.gallery_split) if s not in shape]
        if missing:
            raise BenchError(f"{self.owner}: the data has no {' or '.join(repr(s) for s in missing)} split "
                             f"(it links queries to a gallery: a reID layout with {cfg.query_split!r} and "
                             f"{cfg.gallery_split!r})")
        ids = len(shape[cfg.train_split].counts)
        if ids < cfg.p:
            fix = f"set {self.name}.p={ids}" if ids >= 2 else "add identities to the training split"
            raise BenchError(f"{self.owner}: PK batches of p={cfg.p} identities need {cfg.p} training identities, "
                             f"but split {cfg.train_split!r} has {ids}; {fix}")
        if matched_queries(shape[cfg.query_split], shape[cfg.gallery_split]) == 0:
            raise BenchError(f"{self.owner}: no query has a gallery image of its person from another camera, so "
                             "there is nothing to link")

    def run(self, clean: Splits, released: Release, ctx: RunContext) -> AttackOutcome:
        """Trains (or reuses) the network on released and on clean training images; ranks the clean gallery."""
        cfg = self.config
        for split in (cfg.train_split, cfg.query_split, cfg.gallery_split):
            if split not in clean or (split != cfg.train_split and clean[split].cams is None):
                raise BenchError(f"{self.owner}: dataset {clean.dataset!r} has no {split!r} split with camera ids")
        gallery = clean[cfg.gallery_split]
        with cpu_threads(cfg.threads):
            model = self._model(clean[cfg.train_split], ("clean", clean.fingerprint), ctx)
            g_clean = self._embed(model, gallery.images, ctx)
            clean_top1, clean_map, trials = link(self._embed(model, clean[cfg.query_split].images, ctx), g_clean,
                                                 clean[cfg.query_split], gallery)
            if released.is_clean:
                top1, mean_ap = clean_top1, clean_map
            else:
                model = self._model(released.splits[cfg.train_split], ("release", released.key), ctx)
                q_feat = self._embed(model, released.splits[cfg.query_split].images, ctx)
                top1, mean_ap, _ = link(q_feat, self._embed(model, gallery.images, ctx), clean[cfg.query_split],
                                        gallery)
        chance_top1, chance_map = chance_levels(clean[cfg.query_split], gallery)
        metrics = {"top1": top1, "top1_clean": clean_top1, "chance": chance_top1, "map": mean_ap,
                   "map_clean": clean_map, "chance_map": chance_map, "queries": float(trials)}
        return AttackOutcome(metrics=metrics, value=top1, clean=clean_top1, chance=chance_top1, trials=trials)

    def _embed(self, model: torch.nn.Module, images: torch.Tensor, ctx: RunContext) -> torch.Tensor:
        return embed_images(model, images, tuple(self.config.input_size), ctx.device, batch=256).cpu()

    def _model(self, train: ImageSet, data_key: tuple, ctx: RunContext) -> torch.nn.Module:
        cfg = self.config
        ids, classes = torch.unique(train.labels, return_inverse=True)
        key = ("identity_linkage-model", MODEL_VERSION, data_key, cfg.training_part(), ctx.seed, str(ctx.device.type))
        label = "clean" if data_key[0] == "clean" else "released"

        def build() -> torch.nn.Module:
            torch.manual_seed(derive_seed(ctx.seed, self.name, "init"))
            return ReidNet(cfg.arch, len(ids), cfg.weights, 1).to(ctx.device)

        def train_fn(model: torch.nn.Module) -> dict[str, Any]:
            ctx.log(f"{self.name}: training the adversary's reID network on {label} images ({len(ids)} identities)")
            seed = derive_seed(ctx.seed, self.name, "train")
            return train_reid(model, train.images, classes, cfg.reid_config(), ctx, seed, centroid=False)

        model, _ = cached_model(ctx.cache_dir, key, build, train_fn, ctx.log, name=f"{self.name}.{label}")
        return model.to(ctx.device).eval()


def link(q_feat: torch.Tensor, g_feat: torch.Tensor, query: ImageSet, gallery: ImageSet) -> tuple[float, float, int]:
    """Ranks the gallery for every query by the distance of L2-normalised embeddings.

    Returns:
        (top-1, mAP, queries with a cross-camera match), under the protocol of
        :func:`tasks.reid_metrics.evaluate_rank`.
    """
    dist = torch.cdist(F.normalize(q_feat.float(), dim=1), F.normalize(g_feat.float(), dim=1))
    cmc, mean_ap = evaluate_rank(dist, query.labels, gallery.labels, query.cams, gallery.cams)
    matched = ~torch.isnan(query_average_precision(dist, query.labels, gallery.labels, query.cams, gallery.cams))
    return float(cmc[0]), mean_ap, int(matched.sum())


def chance_levels(query: ImageSet, gallery: ImageSet) -> tuple[float, float]:
    """Returns the expected top-1 and mAP of a random ranking, exactly (:func:`tasks.reid_metrics.random_ranking`)."""
    top1, ap = random_ranking(query.labels, gallery.labels, query.cams, gallery.cams)
    valid = ~torch.isnan(ap)
    return float(top1[valid].mean()), float(ap[valid].mean())
