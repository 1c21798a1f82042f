"""The pretrained face-recognition pipeline shared by the ``face_reid_pretrained*`` adversaries.

No model is trained on the benchmark's data: pretrained recognizers (:mod:`bench.faces.recognizers`)
embed enrolment images of the target identities (the evaluated split, divided into
enrolment and probe images exactly as ``face_reid`` divides it, so every face adversary of
a cell attacks the same probes) and identify probes by cosine similarity to each identity's
template. Faces are placed by the detection chain (:mod:`bench.faces.chain`: MTCNN, then
dlib's HOG detector, then, where ``clean_geometry`` allows it, the clean image's face, then
a fixed box), and how each image was aligned is counted. Embeddings are cached: the clean
ones once per dataset, split and recognizer, released ones once per release, so the three
variants of a cell embed each image once.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import torch

from attacks._reid_pipeline import Targets
from bench.core.config import setting
from bench.core.interfaces import RunContext
from bench.core.keys import content_key
from bench.errors import BenchError
from bench.faces.align import Located
from bench.faces.chain import DETECTORS, check_detectors, describe, load_detectors, locate_faces, typical_box
from bench.faces.identify import Gallery, fuse, hits, verification
from bench.faces.recognizers import BACKENDS, Recognizer, load_recognizer
from bench.storage.cache import Cache

PIPELINE_VERSION = 2
"""2: the detection chain (MTCNN, dlib HOG, clean geometry, fixed box); counts per method."""


@dataclass(frozen=True)
class PretrainedConfig:
    """Settings of the pretrained pipeline (``attacks/presets/face_reid_pretrained.yaml``).

    Attributes:
        backends: Recognizers to run; more than one are fused per probe (an ensemble).
        facenet_weights: Local Inception-ResNet-v1 state dict for ``facenet``.
        onnx_weights: Local ONNX face recognizer for ``onnx`` (ArcFace-style, 112 x 112).
        train_split: The split whose identities the adversary does not target (checked
            disjoint from the targets; nothing is trained on it).
        enrol_per_id: Enrolment images per target identity (the rest are probes).
        max_ids: Cap on target identities (drawn at random), or None for all.
        min_face: Smallest face side the detectors search for; smaller images are taken as crops.
        detectors: Face detectors tried in order on each image until one finds the face, of
            ``mtcnn`` and ``dlib_hog`` (dlib's HOG detector; :mod:`bench.faces.chain`).
        clean_geometry: Where no detector finds the face of a released image, align it on its
            clean version's detected face. Off by default: it hands the adversary where each
            clean probe's face and eyes are (information about the clean image), and it is
            right only for mechanisms that move no pixel (blur, pixelate, noise, DP-Pix,
            face blur or overlay), not for generative ones.
        batch_size: Faces per recognizer call.
        folds: Folds over the pooled identities of a small dataset, as ``face_reid``'s
            (:mod:`attacks._targets`; keep them equal, so that every face adversary attacks
            the same probes).
        fold_below: Folds when fewer identities than this could be targeted in the evaluated split.
    """

    backends: tuple[str, ...] = ("dlib",)
    facenet_weights: str | None = setting(None, path=True)
    onnx_weights: str | None = setting(None, path=True)
    train_split: str = "train"
    enrol_per_id: int = setting(13, low=1)
    max_ids: int | None = setting(None, low=2)
    min_face: int = setting(20, low=8)
    detectors: tuple[str, ...] = DETECTORS
    clean_geometry: bool = False
    batch_size: int = setting(32, low=1)
    folds: int = setting(1, low=1)
    fold_below: int = setting(20, low=0)

    def __post_init__(self) -> None:
        unknown = [b for b in self.backends if b not in BACKENDS]
        if unknown or not self.backends or len(set(self.backends)) != len(self.backends):
            raise BenchError(f"face_reid_pretrained: backends must be distinct names of {', '.join(BACKENDS)} "
                             f"(got {', '.join(self.backends) or 'none'})")
        check_detectors(self.detectors, "face_reid_pretrained")

    def weights_of(self, backend: str) -> str | None:
        """Returns the local weights file a backend reads (None for dlib's packaged ones)."""
        return {"facenet": self.facenet_weights, "onnx": self.onnx_weights}.get(backend)


@lru_cache(maxsize=8)
def _recognizer(backend: str, weights: str | None, device: str) -> Recognizer:
    return load_recognizer(backend, weights, device)


def recognizers(cfg: PretrainedConfig, device: str = "cpu") -> list[Recognizer]:
    """Returns the configured recognizers (loaded once per process and device).

    Args:
        cfg: The pipeline's settings.
        device: Where the recognizers' networks run (those that can run on it).

    Raises:
        BenchError: A missing package or weights file (one line naming it), or a named
            detector's missing package.
    """
    load_detectors(cfg.detectors)
    return [_recognizer(b, cfg.weights_of(b), str(device)) for b in cfg.backends]


@dataclass(frozen=True)
class Embedded:
    """One image set embedded by each recognizer.

    Attributes:
        vectors: Backend name -> float32 [N, D] embeddings.
        located: Where each image's face was placed and by which method of the chain
            (:data:`bench.faces.align.METHODS`).
        box: The median detected face box relative to the image size (x1, y1, x2, y2 in
            [0, 1]), or None when no face was detected.
    """

    vectors: dict[str, np.ndarray]
    located: Located
    box: tuple[float, ...] | None = None

    def counts(self, what: str) -> dict[str, float]:
        """Returns ``<method>_aligned_<what>`` for every method of the chain: how many images it aligned."""
        return {f"{method}_aligned_{what}": float(count) for method, count in self.located.counts().items()}


def embed(cfg: PretrainedConfig, images: torch.Tensor, ctx: RunContext, key: tuple, what: str,
          fallback: tuple[float, ...] | None = None, clean: Located | None = None) -> Embedded:
    """Embeds images with every configured recognizer (cached under ``key``).

    Args:
        cfg: The pipeline's settings.
        images: uint8 [N, C, H, W].
        ctx: The run.
        key: Content key parts of these exact images.
        what: What they are, for progress lines.
        fallback: Relative face box for images where no face is detected (the clean
            images' typical box, so that released probes are cut where their clean
            gallery's faces were); None: these images' own typical box, else the centred
            square.
        clean: The faces of these images' clean versions, for images no detector finds
            (used only with ``cfg.clean_geometry``).
    """
    recs = recognizers(cfg, ctx.device)
    clean = clean if cfg.clean_geometry else None

    def build() -> dict[str, Any]:
        ctx.log(f"face_reid_pretrained: embedding {len(images)} {what} images ({', '.join(cfg.backends)})")
        cpu = images.cpu()
        located = locate_faces(cpu, ctx.device, detectors=cfg.detectors, min_face=cfg.min_face, clean=clean,
                               box=fallback)
        box = typical_box(located, cpu.shape[-2:])
        ctx.log(f"face_reid_pretrained: {what} images aligned by {describe(located.counts())}")
        vectors = {rec.name: torch.from_numpy(rec.embed(cpu, located)) for rec in recs}
        return {"vectors": vectors, "boxes": located.boxes, "points": located.points, "found": located.found,
                "method": located.method, "box": torch.tensor(box if box else [])}

    geometry = None if clean is None else content_key(clean.boxes.tolist(), clean.points.tolist(),
                                                      clean.method.tolist())
    full = content_key("face-embeddings", PIPELINE_VERSION, key, cfg.min_face, list(cfg.detectors), geometry, fallback,
                       [r.identity() for r in recs])
    out, _ = Cache(ctx.cache_dir).get_or_build("embeddings", full, build, describe=f"{what}: {key!r}"[:300])
    box = tuple(float(v) for v in out["box"].tolist()) or None
    located = Located(out["boxes"], out["points"], out["found"], out["method"])
    return Embedded({k: np.asarray(v, np.float32) for k, v in out["vectors"].items()}, located, box)


def clean_embeddings(cfg: PretrainedConfig, targets: Targets, fingerprint: str, ctx: RunContext) -> Embedded:
    """Returns the embeddings of the targets' clean split (enrolment and probes alike), cached per dataset."""
    return embed(cfg, targets.images.images, ctx, ("clean", fingerprint, targets.split), "clean")


@dataclass(frozen=True)
class Identified:
    """What the pipeline achieved on one set of probes against one gallery.

    Attributes:
        hits: Per probe, whether it was identified as its own identity (fused scores).
        metrics: ``top1`` (and per backend ``top1.<backend>`` for an ensemble), TAR at
            the FARs, suffixed by the caller.
    """

    hits: np.ndarray
    metrics: dict[str, float]


def identify(gallery: Embedded, labels: np.ndarray, probes: Embedded, truth: np.ndarray, suffix: str = "") -> Identified:
    """Identifies probes against a gallery with each recognizer and with their fusion.

    Args:
        gallery: Enrolment embeddings.
        labels: Their identities.
        probes: Probe embeddings.
        truth: Each probe's identity.
        suffix: Appended to every metric name (``_clean``).
    """
    per_backend = {}
    for name, vectors in gallery.vectors.items():
        enrolled = Gallery.enrol(vectors, labels)
        per_backend[name] = (enrolled.ids, enrolled.scores(probes.vectors[name]))
    ids = next(iter(per_backend.values()))[0]
    scores = fuse([s for _, s in per_backend.values()])
    found = hits(scores, ids, truth)
    metrics = {f"top1{suffix}": float(found.mean()), **verification(scores, ids, truth, suffix)}
    if len(per_backend) > 1:
        for name, (_, s) in per_backend.items():
            metrics[f"top1.{name}{suffix}"] = float(hits(s, ids, truth).mean())
    return Identified(found, metrics)


def pick(embedded: Embedded, index: torch.Tensor) -> Embedded:
    """Returns the embeddings of some images of a set."""
    rows = index.numpy()
    return Embedded({k: v[rows] for k, v in embedded.vectors.items()}, embedded.located.subset(index), embedded.box)
