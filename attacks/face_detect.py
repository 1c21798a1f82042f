"""Face detection as an adversary: does MTCNN still find the annotated faces of a release?

Obfuscation that leaves a detectable face leaves it to every later step of a pipeline
(cropping, tracking, re-identification). The attack runs MTCNN (facenet-pytorch, packaged
weights) on the evaluated split's images that carry face boxes, released and clean, and
counts a face as found when a detection matches its box one-to-one with IoU >= ``iou``.

- ``detect_rate``: found faces of released images / annotated faces (primary);
- ``detect_rate_clean``: the same on clean images (the attack's clean reference);
- ``chance`` is 0: a guess that ignores the image does not land a box on a face.

The privacy score is the benchmark's: ``1 - clip(rate / rate_clean, 0, 1)``, undefined where
MTCNN does not find the clean faces significantly often (faces below its reliable size).
Per demographic group of the face's image where the data labels one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import torch

from bench.core.config import setting
from bench.core.groups import attack_groups, demographic_groups
from bench.core.interfaces import Attack, AttackOutcome, Release, RunContext
from bench.core.registry import register_attack
from bench.data.base import DataShape, ImageSet, Splits
from bench.errors import BenchError
from bench.faces.detect import detect_boxes, face_hits

__all__ = ["FaceDetect", "FaceDetectConfig"]


@dataclass(frozen=True)
class FaceDetectConfig:
    """Settings of the face-detection adversary (``attacks/presets/face_detect.yaml``).

    Attributes:
        images: Most images with faces to test (spread evenly over the split; None: all).
        iou: Smallest IoU between a detection and a true face box that counts as found.
        min_face: Smallest face side MTCNN searches for, in pixels.
        min_prob: Detections with a lower face probability are dropped.
    """

    images: int | None = setting(None, low=1)
    iou: float = setting(0.5, low=0.0, high=1.0, low_open=True)
    min_face: int = setting(12, low=4)
    min_prob: float = setting(0.9, low=0.0, high=1.0)


@register_attack("face_detect")
class FaceDetect(Attack):
    """MTCNN's detection rate on the annotated faces of released images, against clean images."""

    metrics: ClassVar[dict[str, bool]] = {"detect_rate": True, "detect_rate_clean": True, "chance": True}
    primary: ClassVar[str] = "detect_rate"
    description = "MTCNN detection rate of the annotated faces on released images vs clean images (IoU >= 0.5)"
    validation: ClassVar[bool] = True
    config_class: ClassVar[type] = FaceDetectConfig
    config: FaceDetectConfig

    def config_dict(self) -> dict[str, Any]:
        """Returns the resolved settings."""
        return asdict(self.config)

    def check_data(self, shape: DataShape | None, eval_split: str = "test") -> None:
        """Checks that the evaluated split has images with face boxes, where the data's shape tells (before any work).

        Raises:
            BenchError: The data has no face box on the evaluated split; the message names
                ``boxes.csv`` (a labelled folder's), ``task.data.box_column`` (a Hugging Face
                dataset's) and ``--attacks none``.
        """
        split = (shape or {}).get(eval_split)
        if split is None or split.faces is None or split.faces > 0:
            return
        raise BenchError(f"attack {self.name!r} counts the annotated faces MTCNN still finds, and no image of the "
                         f"{eval_split!r} split has a face box: give a labelled folder ROOT/boxes.csv "
                         "(file,x1,y1,x2,y2) or a Hugging Face dataset --set task.data.box_column=NAME, "
                         "or run with --attacks none")

    def run(self, clean: Splits, released: Release, ctx: RunContext) -> AttackOutcome:
        """Detects faces on the chosen clean and released images and matches them to the true boxes.

        Raises:
            BenchError: The evaluated split has no face boxes, or no image with a face.
        """
        split = ctx.eval_split
        images = clean[split]
        if images.boxes is None:
            raise BenchError(f"attack {self.name!r}: dataset {clean.dataset!r} has no face boxes in split {split!r}")
        pick = self._pick(images)
        truth = [images.boxes[i] for i in pick.tolist()]
        cfg, device = self.config, ctx.device
        ctx.log(f"{self.name}: MTCNN on {len(pick)} clean and released images")
        found_clean = detect_boxes(images.images[pick], device, min_face=cfg.min_face, min_prob=cfg.min_prob)
        found = detect_boxes(released.splits[split].images[pick], device, min_face=cfg.min_face,
                             min_prob=cfg.min_prob)
        clean_hits, hits = face_hits(found_clean, truth, cfg.iou), face_hits(found, truth, cfg.iou)
        owner = torch.cat([torch.full((len(t),), k) for k, t in enumerate(truth)])
        rate, rate_clean = float(hits.float().mean()), float(clean_hits.float().mean())
        metrics = {"detect_rate": rate, "detect_rate_clean": rate_clean, "chance": 0.0,
                   "faces": float(len(hits)), "images": float(len(pick)),
                   "detections_per_image": sum(len(f) for f in found) / len(found)}
        attrs = {name: codes[pick][owner] for name, codes in images.attrs.items()}
        groups = demographic_groups(attrs, images.attr_names)
        outcome_groups = attack_groups(hits.numpy(), clean_hits.numpy(), 0.0, groups, "detect_rate") if groups else {}
        return AttackOutcome(metrics=metrics, value=rate, clean=rate_clean, chance=0.0, trials=len(hits),
                             groups=outcome_groups)

    def _pick(self, images: ImageSet) -> torch.Tensor:
        """Returns the indices of up to ``images`` images with at least one face, spread evenly."""
        with_faces = torch.tensor([i for i, b in enumerate(images.boxes or []) if len(b)], dtype=torch.long)
        if not len(with_faces):
            raise BenchError(f"attack {self.name!r}: no image of the evaluated split has a face box")
        most = self.config.images
        if most is None or len(with_faces) <= most:
            return with_faces
        return with_faces[torch.linspace(0, len(with_faces) - 1, most).round().long()]
