"""Person re-identification on released images (cross-camera reID paper, Sec. III-B, IV-A).

Two models are trained on the released training identities and evaluated on the released
query and gallery images:

- ``regular``: ResNet + BNNeck, label-smoothed softmax + batch-hard triplet loss, each
  query ranking the gallery images (standard Market-1501 protocol);
- ``centroid``: the same network and losses plus the Centroid Triplet Loss (Eq. 4),
  each query ranking gallery centroids (Eq. 5, see :mod:`tasks.reid_centroids`).

Metrics are mAP and CMC rank-1/5/10 of both. The primary metric is the centroid model's
mAP: the reID paper proposes the centroid model as the system a camera operator would run
on protected images, so the utility of a release is what that system still achieves.
Two cross-evaluations separate the effect of the loss from that of the centroid gallery
(``*_regular_on_centroids``, ``*_centroid_on_images``), and the expected mAP of a random
ranking of each gallery (computed exactly) is reported as its chance level. Queries without
a gallery image of their identity from another camera are skipped, as the protocol skips
them (``queries`` and ``skipped_queries`` count them, with a warning); a cell where every
query would be skipped is refused in the plan, from the cameras of the data's shape. Models
are cached by the content key of their training data, so the clean models train once per
dataset, profile and seed.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from bench.core.config import setting
from bench.core.groups import MIN_GROUP_SIZE, demographic_groups, mean_groups
from bench.core.interfaces import Release, RunContext, Task
from bench.core.keys import content_key
from bench.data.base import DataShape, ImageSet, Splits, SplitShape
from bench.errors import BenchError
from bench.nn.augment import augment
from bench.nn.images import embed_images, to_input
from bench.nn.losses import batch_hard_triplet_loss, centroid_triplet_loss
from bench.nn.resnet import ARCHS, ReidNet, check_weights
from bench.nn.sampling import PKSampler
from bench.nn.threads import cpu_threads
from bench.randomness.seeding import derive_seed
from bench.storage.cache import warn
from bench.storage.modelcache import cached_model
from bench.system import precision
from tasks.reid_centroids import (
    CentroidGallery,
    build_centroids,
    centroid_chance,
    centroid_query_aps,
    evaluate_centroids,
)
from tasks.reid_metrics import evaluate_rank, matched_queries, random_ranking

MODEL_VERSION = 1
METRICS_VERSION = 2
"""2: the chance levels are the exact expected mAP of a random ranking (no longer the mean of 10 sampled rankings)."""
KINDS = ("regular", "centroid")
RANKS = (1, 5, 10)
MIN_MATCHED_QUERIES = 1
"""Queries with a cross-camera match a cell needs: with none, every query is skipped and nothing is ranked."""


@dataclass(frozen=True)
class ReidConfig:
    """Settings of one reID profile (see ``tasks/presets/reid_*.yaml``).

    Attributes:
        data: Loader options of the dataset.
        arch: ResNet backbone (``resnet18`` ... ``resnet101``).
        weights: Local ImageNet weights of the backbone, or None to train from scratch.
        last_stride: Stride of ``layer4`` (1 as in Bag of Tricks and Centroid-reID).
        input_size: Network input (h, w); released images are resized to it.
        p: Identities per batch.
        k: Images per identity in a batch.
        epochs: Passes of the PK sampler over the training images.
        lr: Adam learning rate after warm-up.
        weight_decay: Adam weight decay.
        warmup_epochs: Linear warm-up from lr / 10.
        lr_steps: Epochs at which the learning rate is multiplied by ``lr_gamma``.
        lr_gamma: Step decay factor.
        label_smoothing: Of the identity cross-entropy.
        margin: Batch-hard triplet margin (None: soft margin).
        ctl_margin: Centroid triplet margin alpha_c (None: soft margin).
        ctl_squared: Squared distances in the centroid triplet loss, as Eq. 4 is written
            (False: plain Euclidean distances, as Centroid-reID's training code).
        pad: Zero-padding of the random-crop augmentation, in input pixels.
        erasing: Random-erasing probability.
        keep_distractors: Keep distractor images as one-image classes in the centroid
            gallery (Centroid-reID drops them).
        threads: CPU threads while training and embedding (None: torch's setting); 1
            is fastest on a CPU shared with other heavy jobs.
    """

    data: dict = field(default_factory=dict)
    arch: str = setting("resnet50", choices=ARCHS)
    weights: str | None = setting(None, path=True)
    last_stride: int = setting(1, choices=(1, 2))
    input_size: tuple = setting((256, 128), low=16, high=1024)
    p: int = setting(16, low=2)
    k: int = setting(4, low=2)
    epochs: int = setting(120, low=1)
    lr: float = setting(3.5e-4, low=0, low_open=True, high=10)
    weight_decay: float = setting(5e-4, low=0)
    warmup_epochs: int = setting(10, low=0)
    lr_steps: tuple = setting((40, 70), low=0)
    lr_gamma: float = setting(0.1, low=0, low_open=True, high=1)
    label_smoothing: float = setting(0.1, low=0, high=1)
    margin: float | None = setting(0.3, low=0)
    ctl_margin: float | None = setting(0.3, low=0)
    ctl_squared: bool = False
    pad: int = setting(10, low=0)
    erasing: float = setting(0.5, low=0, high=1)
    keep_distractors: bool = False
    threads: int | None = setting(None, low=1)

    def training_part(self, kind: str) -> dict[str, Any]:
        """Returns the settings the weights of a ``regular`` or ``centroid`` model depend on."""
        skip = {"keep_distractors", "threads"} | ({"ctl_margin", "ctl_squared"} if kind == "regular" else set())
        return {k: v for k, v in asdict(self).items() if k not in skip}


class Reid(Task):
    """Regular and centroid-based person re-identification on one dataset."""

    metrics: ClassVar[dict[str, bool]] = {
        **{f"{m}_{kind}": True for kind in KINDS for m in ("map", *(f"rank{r}" for r in RANKS))},
        "map_regular_on_centroids": True,
        "rank1_regular_on_centroids": True,
        "map_centroid_on_images": True,
        "rank1_centroid_on_images": True,
        "chance_map_images": True,
        "chance_map_centroids": True,
    }
    primary: ClassVar[str] = "map_centroid"

    config_class: ClassVar[type] = ReidConfig
    version: ClassVar[tuple[int, ...]] = (MODEL_VERSION, METRICS_VERSION)
    precisions: ClassVar[tuple[str, ...]] = ("fp32", "bf16")
    config: ReidConfig

    def __init__(self, profile: str = "quick", overrides: dict[str, Any] | None = None):
        super().__init__(profile, overrides)
        owner, cfg = self.owner, self.config
        if cfg.arch not in ARCHS:
            raise BenchError(f"{owner}: unknown arch {cfg.arch!r} (available: {', '.join(ARCHS)})")
        if len(cfg.input_size) != 2 or min(cfg.input_size) < 16:
            raise BenchError(f"{owner}: input_size must be (h, w) with sides >= 16, got {cfg.input_size!r}")
        if cfg.p < 2 or cfg.k < 2:
            raise BenchError(f"{owner}: batch-hard losses need p >= 2 and k >= 2, got p={cfg.p}, k={cfg.k}")
        check_weights(cfg.weights, owner)

    def data_options(self) -> dict[str, Any]:
        """Returns the loader options of this profile."""
        return dict(self.config.data)

    def input_size(self) -> tuple[int, int]:
        """Returns the network input (height, width)."""
        return (int(self.config.input_size[0]), int(self.config.input_size[1]))

    def config_dict(self) -> dict[str, Any]:
        """Returns the resolved profile settings."""
        return asdict(self.config)

    def check_data(self, shape: DataShape | None, eval_split: str = "test") -> None:
        """Checks that the training identities can fill a PK batch and that there are queries and a gallery.

        Raises:
            BenchError: Fewer training identities than ``p`` (the message names ``task.p``,
                or the data's identity settings where even p=2 cannot be served), or an
                empty query or gallery split.
        """
        if shape is None:
            return
        owner, p = f"task {self.name!r}", self.config.p
        empty = {"query": "no identified image (only junk or distractors): add query images of people in the gallery",
                 "gallery": "no image of the query identities: add gallery images of the people in the queries"}
        for split, why in empty.items():
            if split in shape and not shape[split].counts:
                raise BenchError(f"{owner}: the {split!r} split has {why}")
        if "query" in shape and "gallery" in shape:
            self._check_cameras(shape["query"], shape["gallery"])
        ids = len(shape["train"].counts) if "train" in shape else 0
        if ids >= p:
            return
        name = next((k for k in ("max_classes", "max_ids") if k in self.config.data), "max_classes")
        limit = self.config.data.get(name)
        capped = isinstance(limit, int) and ids >= limit
        more = f"raise task.data.{name} (now {limit})" if capped else "add identities to the training folder"
        fix = f"lower task.p to {ids} or {more}" if ids >= 2 else more
        raise BenchError(f"{owner}: PK batches of p={p} identities need {p} training identities, but split 'train' "
                         f"has {ids}; {fix}")

    def _check_cameras(self, query: SplitShape, gallery: SplitShape) -> None:
        """Checks that some query has a gallery image of its identity from another camera (the protocol's match).

        Raises:
            BenchError: No query has one, so the protocol would skip every query; the message
                names ``task.data.per_class`` where it caps the images of each identity.
        """
        matched = matched_queries(query, gallery)
        if matched is None or matched >= MIN_MATCHED_QUERIES:
            return
        name = next((k for k in ("per_class", "per_id") if k in self.config.data), "per_class")
        cap = self.config.data.get(name)
        more = "add gallery images of the query identities taken by other cameras than their queries"
        if isinstance(cap, int):
            more = (f"raise task.data.{name} (now {cap}: each identity's first images in name order may all come from "
                    f"one camera) or {more}")
        raise BenchError(f"task {self.name!r}: none of the {query.images} queries has a gallery image of its identity "
                         "from another camera, and the Market-1501 protocol drops same-camera matches, so every query "
                         f"would be skipped; {more}")

    def evaluate(self, clean: Splits, released: Release, ctx: RunContext) -> dict[str, float]:
        """Trains (or reuses) both models on the released training split; ranks released queries."""
        splits = released.splits
        data_key = ("clean", clean.fingerprint) if released.is_clean else ("release", released.key)
        query, gallery = splits["query"], splits["gallery"]
        for split in (query, gallery):
            if split.cams is None:
                raise BenchError(f"task {self.name!r}: dataset {clean.dataset!r} has no camera ids")

        def centroids_of(g_feat: torch.Tensor) -> CentroidGallery:
            return build_centroids(g_feat, gallery.labels, gallery.cams, query.labels, query.cams,
                                   self.config.keep_distractors)

        out: dict[str, float] = {}
        for kind in KINDS:
            with cpu_threads(self.config.threads):
                model = self._model(kind, splits["train"], data_key, ctx)
                q_feat = self._embed(model, query, ctx)
                g_feat = self._embed(model, gallery, ctx)
            on_images = rank_images(q_feat, g_feat, query, gallery)
            on_centroids = evaluate_centroids(q_feat, query.labels, query.cams, centroids_of(g_feat))
            own, other = (on_images, on_centroids) if kind == "regular" else (on_centroids, on_images)
            cmc, mean_ap = own
            out[f"map_{kind}"] = mean_ap
            out.update({f"rank{r}_{kind}": float(cmc[min(r, len(cmc)) - 1]) for r in RANKS})
            suffix = "on_centroids" if kind == "regular" else "on_images"
            out[f"map_{kind}_{suffix}"] = other[1]
            out[f"rank1_{kind}_{suffix}"] = float(other[0][0])
            if kind == "centroid":
                self._group_map(q_feat, query, centroids_of(g_feat), ctx)
        out.update(self._chance(query, gallery, centroids_of))
        out.update(self._query_counts(query, gallery, ctx))
        return out

    def _query_counts(self, query: ImageSet, gallery: ImageSet, ctx: RunContext) -> dict[str, float]:
        """Counts the queries the protocol skips (none of their identity's gallery images is from another camera)."""
        def shape(split: ImageSet) -> SplitShape:
            return SplitShape.of_labels(split.labels.tolist(), cameras=split.cams.tolist())

        matched = matched_queries(shape(query), shape(gallery)) or 0
        skipped = len(query) - matched
        if skipped:
            warn(f"task {self.name!r}: {skipped} of {len(query)} queries have no gallery image of their identity "
                 "from another camera and are skipped, as the Market-1501 protocol does; the metrics rank "
                 f"{matched} queries")
        ctx.log(f"{self.name}: {matched} of {len(query)} queries have a cross-camera match in the gallery")
        return {"queries": float(matched), "skipped_queries": float(skipped)}

    @staticmethod
    def _chance(query: ImageSet, gallery: ImageSet,
                centroids_of: Callable[[torch.Tensor], CentroidGallery]) -> dict[str, float]:
        """Expected mAP of a uniformly random ranking (one that ignores the images), per gallery kind, exactly.

        Exact rather than the mean of a few random rankings: with a few dozen queries (smoke
        on real data) such a mean moves by several points from seed to seed.
        """
        per_query = random_ranking(query.labels, gallery.labels, query.cams, gallery.cams)[1]
        images = float(per_query[~torch.isnan(per_query)].mean())
        centroids = centroid_chance(query.labels, query.cams, centroids_of(torch.zeros(len(gallery), 1)))
        return {"chance_map_images": images, "chance_map_centroids": centroids}

    def _group_map(self, q_feat: torch.Tensor, query: ImageSet, centroids: CentroidGallery, ctx: RunContext) -> None:
        """Reports ``map_centroid`` per demographic group of the queries (each query ranks every centroid)."""
        groups = demographic_groups(query.attrs, query.attr_names)
        if not groups:
            return
        aps = centroid_query_aps(q_feat, query.labels, query.cams, centroids).numpy()
        matched = ~np.isnan(aps)
        groups = {attr: {value: mask & matched for value, mask in members.items()} for attr, members in groups.items()}
        table = mean_groups(np.nan_to_num(aps), groups, "map_centroid", MIN_GROUP_SIZE)
        ctx.groups["utility"] = (table, "mean average precision of each group's queries against the whole centroid "
                                        "gallery (queries without a match left out)")

    def _embed(self, model: torch.nn.Module, split: ImageSet, ctx: RunContext) -> torch.Tensor:
        return embed_images(model, split.images, self.config.input_size, ctx.device, batch=256).cpu()

    def _model(self, kind: str, train: ImageSet, data_key: tuple, ctx: RunContext) -> torch.nn.Module:
        cfg = self.config
        ids, classes = torch.unique(train.labels, return_inverse=True)
        key = ("reid-model", MODEL_VERSION, kind, data_key, cfg.training_part(kind), ctx.seed, str(ctx.device.type))

        def build() -> torch.nn.Module:
            torch.manual_seed(derive_seed(ctx.seed, self.name, kind, "init"))
            return ReidNet(cfg.arch, len(ids), cfg.weights, cfg.last_stride).to(ctx.device)

        def train_fn(model: torch.nn.Module) -> dict[str, Any]:
            ctx.log(f"training the {kind} reID model ({cfg.arch}, {len(ids)} identities, {content_key(*key)[:8]})")
            seed = derive_seed(ctx.seed, self.name, kind, "train")
            return train_reid(model, train.images, classes, cfg, ctx, seed, centroid=kind == "centroid")

        model, _ = cached_model(ctx.cache_dir, key, build, train_fn, ctx.log, name=f"reid.{kind}")
        return model.to(ctx.device)


def rank_images(q_feat: torch.Tensor, g_feat: torch.Tensor, query: ImageSet, gallery: ImageSet) -> tuple[torch.Tensor, float]:
    """Ranks gallery images by the Euclidean distance of L2-normalised embeddings.

    Returns:
        The CMC curve and the mAP under the standard protocol.
    """
    dist = torch.cdist(F.normalize(q_feat.float(), dim=1), F.normalize(g_feat.float(), dim=1))
    return evaluate_rank(dist, query.labels, gallery.labels, query.cams, gallery.cams)


def learning_rate(cfg: ReidConfig, epoch: int) -> float:
    """Returns the learning rate of an epoch: linear warm-up from lr / 10, then step decay."""
    if epoch < cfg.warmup_epochs:
        return cfg.lr * (0.1 + 0.9 * epoch / cfg.warmup_epochs)
    return cfg.lr * cfg.lr_gamma ** sum(epoch >= step for step in cfg.lr_steps)


def train_reid(
    model: ReidNet,
    images: torch.Tensor,
    classes: torch.Tensor,
    cfg: ReidConfig,
    ctx: RunContext,
    seed: int,
    centroid: bool,
) -> dict[str, Any]:
    """Trains a reID network on PK batches with Adam.

    The loss is label-smoothed cross-entropy on the BNNeck logits plus the batch-hard
    triplet loss on the pooled features, plus the Centroid Triplet Loss for the centroid
    model.

    Args:
        model: The network (on ``ctx.device``), trained in place.
        images: uint8 training images [N, C, H, W].
        classes: Identity index of each image (0 .. num_classes - 1).
        cfg: The profile's settings.
        ctx: The run's context.
        seed: Seed of the batches and augmentations.
        centroid: Add the Centroid Triplet Loss.

    Returns:
        Facts about the training (steps, mean losses of the last epoch, seconds).
    """
    started = time.perf_counter()
    g = torch.Generator().manual_seed(seed)
    sampler = PKSampler(classes, cfg.p, cfg.k, g)
    optimiser = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    model.train()
    precision.verify(model, to_input(images[: cfg.p * cfg.k], cfg.input_size, ctx.device), "the reID model")
    steps, last = 0, {}
    curve: dict[str, list[float]] = {"loss": [], "ce": [], "triplet": []} | ({"ctl": []} if centroid else {})
    for epoch in ctx.progress(range(cfg.epochs), total=cfg.epochs, desc="reID epochs"):
        for group in optimiser.param_groups:
            group["lr"] = learning_rate(cfg, epoch)
        sums = {"ce": 0.0, "triplet": 0.0, "ctl": 0.0}
        batches = 0
        for batch in sampler.epoch():
            x = augment(to_input(images[batch], cfg.input_size, ctx.device), g, pad=cfg.pad, erasing=cfg.erasing)
            y = classes[batch].to(ctx.device)
            with precision.autocast(ctx.device):
                features, logits = model(x)
            features, logits = features.float(), logits.float()
            ce = F.cross_entropy(logits, y, label_smoothing=cfg.label_smoothing)
            triplet = batch_hard_triplet_loss(features, y, cfg.margin)
            loss = ce + triplet
            if centroid:
                ctl = centroid_triplet_loss(features, y, cfg.ctl_margin, squared=cfg.ctl_squared)
                loss = loss + ctl
                sums["ctl"] += ctl.item()
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
            sums["ce"] += ce.item()
            sums["triplet"] += triplet.item()
            batches += 1
        steps += batches
        last = {name: value / max(batches, 1) for name, value in sums.items()}
        for name in curve:
            curve[name].append(sum(last.values()) if name == "loss" else last[name])
    model.eval()
    return {"steps": steps, "last_epoch_losses": last, "seconds": time.perf_counter() - started, "curve": curve}
