"""The face re-identification pipeline shared by the face adversaries (few-shot paper, Sec. V).

An adversary trains a face embedder on its own identities (the training split), enrols
the target identities (the split being evaluated, disjoint from its own) with a linear
SVC on some of their images, and identifies the others (the probes). ``face_reid``,
``face_reid_adapted`` and ``denoise`` all run this pipeline; they differ only in which
images the embedder is trained on, which images are enrolled and which probes are shown.
The clean-trained embedder is cached once per dataset, profile and seed and shared by all
three.
"""

from __future__ import annotations

import functools
import os
from dataclasses import asdict, dataclass
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F

from attacks._targets import Fold, Targets, find_folds, find_targets, pooled_targets
from bench.core.config import setting
from bench.core.interfaces import AttackOutcome, Mechanism, Release, RunContext
from bench.data.base import Splits
from bench.errors import BenchError
from bench.nn.classify import ClassifierTraining, train_classifier
from bench.nn.face_cnn import build_face_model
from bench.nn.images import image_batches, to_input
from bench.nn.threads import cpu_threads
from bench.randomness.seeding import derive_seed
from bench.storage.modelcache import cached_model

__all__ = ["Fold", "Targets", "find_folds", "find_targets", "pooled_targets"]  # re-exported for the adversaries

MODEL_VERSION = 2
"""2: embedders train in channels_last memory format (faster convolutions; other float rounding)."""
FACE_MODELS = ("small_cnn", "inception_resnet_v1")


@dataclass(frozen=True)
class FaceReidConfig:
    """Settings of the face re-identification pipeline (``attacks/presets/face_reid.yaml``).

    Attributes:
        model: Embedder architecture.
        weights: Local Inception-ResNet-v1 state dict, or None to train from scratch.
        width: First-stage filters of the small CNN.
        input_size: Side of the embedder's square input.
        epochs: Passes of the embedder over the adversary's training images.
        batch_size: Images per step.
        lr: Peak Adam learning rate (one-cycle schedule).
        train_split: The adversary's own identities.
        enrol_per_id: Enrolment images per target identity (the rest are probes).
        max_ids: Cap on target identities (drawn at random), or None for all.
        svc_c: Regularisation of the linear SVC.
        folds: Folds over the pooled identities of a small dataset (1: never folds;
            :mod:`attacks._targets`).
        fold_below: Folds when fewer identities than this could be targeted in the evaluated split.
    """

    model: str = setting("small_cnn", choices=FACE_MODELS)
    weights: str | None = setting(None, path=True)
    width: int = setting(32, low=1)
    input_size: int = setting(48, low=8)
    epochs: int = setting(8, low=1)
    batch_size: int = setting(64, low=1)
    lr: float = setting(2e-3, low=0, low_open=True)
    train_split: str = "train"
    enrol_per_id: int = setting(13, low=1)
    max_ids: int | None = setting(None, low=2)
    svc_c: float = setting(1.0, low=0, low_open=True)
    folds: int = setting(1, low=1)
    fold_below: int = setting(20, low=0)

    def __post_init__(self) -> None:
        """Refuses weights the model would ignore, and a weights file that is no Inception-ResNet-v1 checkpoint.

        Raises:
            BenchError: ``weights`` with ``model=small_cnn`` (it trains from scratch), or a
                file that is not such a state dict (checked here, before any training).
        """
        if self.weights is None or not os.path.isfile(os.path.expanduser(str(self.weights))):
            return  # a missing file is the setting's own check ("no such file")
        if self.model != "inception_resnet_v1":
            raise BenchError(f"weights={self.weights!r} is read only by model=inception_resnet_v1; model={self.model!r} "
                             "trains from scratch and would ignore it (set model=inception_resnet_v1 or drop weights)")
        check_face_weights(str(self.weights))

    def training_part(self) -> dict[str, Any]:
        """Returns the settings the embedder's weights depend on."""
        keep = {"model", "weights", "width", "input_size", "epochs", "batch_size", "lr", "train_split"}
        return {k: v for k, v in asdict(self).items() if k in keep}


def check_face_weights(path: str) -> None:
    """Checks that a file is an Inception-ResNet-v1 state dict (facenet-pytorch's keys and shapes), loading no code.

    A missing file is left to the setting's own check (``no such file``). The answer is
    kept per file, size and modification time: a grid plans many cells with one file.

    Raises:
        BenchError: The file is unreadable, not a ``torch.save`` of tensors
            (``weights_only`` refuses anything else), or its keys or shapes differ.
    """
    file = os.path.expanduser(path)
    if not os.path.isfile(file):
        return
    stat = os.stat(file)
    problem = _weights_problem(file, stat.st_size, stat.st_mtime_ns)
    if problem:
        raise BenchError(f"face_reid weights {path!r} is not an Inception-ResNet-v1 checkpoint: {problem}")


@functools.lru_cache(maxsize=8)
def _weights_problem(file: str, size: int, mtime_ns: int) -> str:
    """Returns why ``file`` is no Inception-ResNet-v1 state dict, or ``""`` (size and time key the cache)."""
    from facenet_pytorch import InceptionResnetV1

    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as exc:  # unpickling errors of every kind: not a torch.save of tensors
        return f"cannot be read as a state dict ({type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''})"
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        return f"it holds a {type(state).__name__}, not a mapping of names to tensors"
    expected = {k: v.shape for k, v in InceptionResnetV1(pretrained=None, classify=False).state_dict().items()}
    given = {k: v.shape for k, v in state.items() if not k.startswith("logits.")}
    missing = sorted(set(expected) - set(given))
    unexpected = sorted(set(given) - set(expected))
    wrong = sorted(k for k in set(expected) & set(given) if expected[k] != given[k])
    for what, keys in (("missing", missing), ("unexpected", unexpected), ("of another shape", wrong)):
        if keys:
            return f"{len(keys)} key(s) {what}, e.g. {keys[0]!r}"
    return ""


def clean_embedder(cfg: FaceReidConfig, clean: Splits, ctx: RunContext, fold: Fold) -> torch.nn.Module:
    """Returns the embedder trained on the adversary's clean identities of a fold (cached, shared)."""
    key = ("face_reid-model", MODEL_VERSION, clean.fingerprint, cfg.training_part(), _weights(cfg, ctx), ctx.seed,
           str(ctx.device.type), *((fold.key,) if fold.key else ()))
    train = fold.own
    return _embedder(cfg, lambda: train.images, train.labels, key, ctx, "clean" + fold.suffix.replace("/", "."))


@dataclass(frozen=True)
class AdaptedTraining:
    """How an adapted embedder is trained on the adversary's released images.

    Attributes:
        epochs: Passes over the images.
        start: A trained embedder to fine-tune from, or None to train from scratch.
        threads: CPU threads while training (None: torch's setting).
    """

    epochs: int
    start: torch.nn.Module | None = None
    threads: int | None = None


def adapted_embedder(
    cfg: FaceReidConfig, images: Callable[[], torch.Tensor], labels: torch.Tensor, data_key: tuple, ctx: RunContext,
    how: AdaptedTraining,
) -> torch.nn.Module:
    """Returns an embedder trained on the adversary's own released images (cached).

    Args:
        cfg: The pipeline's settings.
        images: Makes the adversary's training images after the mechanism (called only
            when the embedder is not cached).
        labels: Their identities.
        data_key: Content key of those images (release key and stream purpose).
        ctx: The run's context.
        how: Epochs, starting point and threads.
    """
    key = ("face_reid-adapted-model", MODEL_VERSION, data_key, cfg.training_part(), _weights(cfg, ctx), how.epochs,
           how.start is not None, how.threads, ctx.seed, str(ctx.device.type))
    return _embedder(cfg, images, labels, key, ctx, "adapted", how)


def _weights(cfg: FaceReidConfig, ctx: RunContext) -> str | None:
    return ctx.options.get("face_reid.weights", cfg.weights)


def _embedder(
    cfg: FaceReidConfig, images: Callable[[], torch.Tensor], labels: torch.Tensor, key: tuple, ctx: RunContext,
    label: str, how: AdaptedTraining | None = None,
) -> torch.nn.Module:
    ids, classes = torch.unique(labels, return_inverse=True)
    seed_purpose = ("face_reid",) if label == "clean" else ("face_reid", label)

    def build() -> torch.nn.Module:
        torch.manual_seed(derive_seed(ctx.seed, *seed_purpose, "init"))
        model = build_face_model(cfg.model, len(ids), _weights(cfg, ctx), cfg.width).to(
            ctx.device, memory_format=torch.channels_last)
        if how is not None and how.start is not None:
            model.load_state_dict(how.start.state_dict())
        return model

    def train_fn(model: torch.nn.Module) -> dict[str, Any]:
        ctx.log(f"training the {label} face embedder ({cfg.model}, {len(ids)} identities)")
        spec = ClassifierTraining(
            epochs=how.epochs if how else cfg.epochs, batch_size=cfg.batch_size, lr=cfg.lr, weight_decay=5e-4,
            input_size=cfg.input_size, augment=augment, label_smoothing=0.1, desc=f"{label} face embedder epochs",
        )
        data = images()
        with cpu_threads(how.threads if how else None):
            return train_classifier(model, data, classes, spec, ctx, derive_seed(ctx.seed, *seed_purpose, "train"))

    model, _ = cached_model(ctx.cache_dir, key, build, train_fn, ctx.log, name=f"face_reid.{label}")
    return model.to(ctx.device).eval()


@torch.no_grad()
def embed_faces(model: torch.nn.Module, images: torch.Tensor, cfg: FaceReidConfig, ctx: RunContext,
                batch: int = 256) -> np.ndarray:
    """Returns the L2-normalised embeddings [N, D] of uint8 face images."""
    model.eval()
    parts = [model.embed(to_input(chunk, cfg.input_size, ctx.device)).cpu()
             for chunk in image_batches(images, batch, ctx.device)]
    return torch.cat(parts).numpy()


class FaceIdentifier:
    """A linear SVC over one embedder's embeddings of the enrolled identities.

    Args:
        model: The embedder.
        enrol_images: uint8 enrolment images.
        enrol_labels: Their identities.
        cfg: The pipeline's settings.
        ctx: The run's context.
    """

    def __init__(self, model: torch.nn.Module, enrol_images: torch.Tensor, enrol_labels: torch.Tensor,
                 cfg: FaceReidConfig, ctx: RunContext):
        from sklearn.svm import SVC

        self.model, self.cfg, self.ctx = model, cfg, ctx
        self.svc = SVC(kernel="linear", C=cfg.svc_c)
        self.svc.fit(embed_faces(model, enrol_images, cfg, ctx), enrol_labels.numpy())

    def hits(self, probes: torch.Tensor, truth: np.ndarray) -> np.ndarray:
        """Returns, per probe image, whether it is identified as its true identity."""
        return self.svc.predict(embed_faces(self.model, probes, self.cfg, self.ctx)) == truth

    def top1(self, probes: torch.Tensor, truth: np.ndarray) -> float:
        """Returns the fraction of probe images identified as their true identity."""
        return float(np.mean(self.hits(probes, truth)))


def known_mechanism(released: Release, owner: str) -> Mechanism:
    """Returns the fitted mechanism that made a release (adaptive adversaries know it).

    Raises:
        BenchError: The release does not carry its mechanism.
    """
    if released.instance is None:
        raise BenchError(f"{owner}: the release does not carry its mechanism (Release.instance); "
                         f"an adaptive adversary needs it")
    return released.instance


def clean_reference(
    cfg: FaceReidConfig, clean: Splits, fold: Fold, ctx: RunContext
) -> tuple[FaceIdentifier, np.ndarray]:
    """Returns a fold's clean pipeline (clean embedder, clean enrolment) and its hits on clean probes."""
    targets = fold.targets
    identifier = FaceIdentifier(clean_embedder(cfg, clean, ctx, fold), targets.images.images[targets.enrol],
                                targets.images.labels[targets.enrol], cfg, ctx)
    return identifier, identifier.hits(targets.images.images[targets.probe], targets.probe_labels())


def pooled_outcome(folds: list[Fold], hits: list[np.ndarray], clean_hits: list[np.ndarray],
                   **extra: float) -> AttackOutcome:
    """Returns the top-1 outcome of hits pooled over folds (probes summed; ``extra`` metrics appended).

    Args:
        folds: The attack's folds.
        hits: Per fold, whether each released probe was identified.
        clean_hits: Per fold, the same for the clean probes.
        **extra: Further metrics.
    """
    targets = pooled_targets(folds)
    hit, clean_hit = np.concatenate(hits), np.concatenate(clean_hits)
    top1, top1_clean = float(hit.mean()), float(clean_hit.mean())
    metrics = {"top1": top1, "top1_clean": top1_clean, "chance": targets.chance, **targets.counts(), **extra}
    return AttackOutcome(metrics=metrics, value=top1, clean=top1_clean, chance=targets.chance,
                         trials=len(targets.probe), groups=targets.groups(hit, clean_hit))


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
