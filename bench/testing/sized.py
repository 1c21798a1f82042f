"""The conformance checks and the empirical audit at a benchmark's own image size and release batch size.

The suite (:mod:`bench.testing.mechanisms`) runs on batches of 4 small images and the audit
on 8 x 8 images: a mechanism honest there can cheat at the size its cells release (64 x 64
faces, 128 x 128 scenes) or on batch positions a batch of 4 never reaches (the release
path hands it 1,024 images at a time on the CPU). :func:`sized_conformance` runs the
checks about what a mechanism does to a batch on one batch of the benchmark's shape and
release batch size; :func:`sized_audit` audits the claim on images of the benchmark's
side with a small trial budget, enough to refute a claim that an un-noised or leaked
value breaks (such a value separates the neighbouring inputs infinitely well), not to
refute a modest over-claim (the 8 x 8 audit does that).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from bench.audit.config import MAX_IMAGE_SIZE, MIN_IMAGE_SIZE
from bench.audit.report import AuditReport
from bench.audit.run import run_audit
from bench.core.interfaces import PrivacyClaim
from bench.privacy.audit_maths import max_demonstrable_epsilon
from bench.release.dataset import BATCH, stays_on_device
from bench.system.kernels import DEVICE_BATCH_VALUES
from bench.testing._mechanism_cases import ConformanceError, case_shapes
from bench.testing.mechanisms import PREFLIGHT

__all__ = ["MAX_SIZED_BATCH", "SIZED_AUDIT_MAX_TRIALS", "SIZED_CHECKS", "SizedTarget", "release_batch",
           "sized_audit", "sized_conformance", "within_reach"]

SIZED_CHECKS = {name: check for name, check in PREFLIGHT.items() if name != "claim_wellformed"}
"""The checks run at a benchmark's size: what a mechanism does to a batch (not what it refuses, nor its claim)."""

SIZED_AUDIT_MAX_TRIALS = 2_000
"""Counted trials per input of the audit at a benchmark's size: at 99% an un-noised value refutes any
claim below about 6 with these; a smaller over-claim is the 8 x 8 audit's to find."""

SIZED_AUDIT_CONFIDENCE = 0.99
"""Joint confidence of the sized audit's bound."""

MAX_SIZED_BATCH = 4_096
"""Largest batch the sized checks run (an accelerator's release batch can be larger; its first
4,096 positions are checked, each against the image alone)."""


@dataclass(frozen=True)
class SizedTarget:
    """The shape a benchmark's release hands a mechanism.

    Attributes:
        benchmark: The benchmark's name.
        channels: Channels of its stored images.
        height: Stored height (the mechanism runs at the stored size).
        width: Stored width.
        batch: Images per release batch (:func:`release_batch`), at most the largest split released.
    """

    benchmark: str
    channels: int
    height: int
    width: int
    batch: int

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """The batch shape (N, C, H, W)."""
        return (self.batch, self.channels, self.height, self.width)

    def describe(self) -> str:
        """Returns ``benchmark (N x C x H x W)``."""
        return f"{self.benchmark} ({' x '.join(map(str, self.shape))})"


def release_batch(device: torch.device | str, channels: int, height: int, width: int, largest: int) -> int:
    """Returns the images per batch the release path gives a mechanism (:func:`bench.release.dataset.apply_to_split`).

    Args:
        device: Where the release runs.
        channels: Channels of the images.
        height: Their height.
        width: Their width.
        largest: Images in the largest split released (a batch never holds more).
    """
    values = max(1, channels * height * width)
    batch = max(BATCH, DEVICE_BATCH_VALUES // values) if stays_on_device(torch.device(device)) else BATCH
    return max(1, min(batch, largest, MAX_SIZED_BATCH))


def sized_conformance(name: str, params: Mapping[str, Any] | None, target: SizedTarget,
                      device: str | torch.device) -> list[str]:
    """Runs :data:`SIZED_CHECKS` on one batch of ``target``'s shape.

    Returns:
        One ``"check at BENCHMARK (N x C x H x W): message"`` line per failed check; empty when all pass.
    """
    failures = []
    with case_shapes([target.shape]):
        for check, run in SIZED_CHECKS.items():
            try:
                run(name, params=params, device=device)
            except ConformanceError as exc:
                failures.append(f"{check} at {target.describe()}: {exc}")
            except Exception as exc:  # noqa: BLE001 (a crash at the task's size is a failure there)
                failures.append(f"{check} at {target.describe()}: {name}: crashed with {type(exc).__name__}: {exc}")
    return failures


def audit_side(target: SizedTarget) -> int:
    """Returns the side of the sized audit's square images: the stored height and width's geometric mean, in range.

    A square benchmark (64 x 64 faces) is audited at its own size; the audit's ragged
    images are (S+3) x (S+1).
    """
    side = round(math.sqrt(target.height * target.width))
    return max(MIN_IMAGE_SIZE, min(MAX_IMAGE_SIZE, side))


def within_reach(claim: PrivacyClaim) -> bool:
    """Whether the sized audit's trials can refute ``claim`` at all (an epsilon above about 6 cannot be)."""
    reach = max_demonstrable_epsilon(SIZED_AUDIT_MAX_TRIALS, claim.delta, SIZED_AUDIT_CONFIDENCE)
    return claim.epsilon < reach


def sized_audit(name: str, params: Mapping[str, Any], target: SizedTarget, device: str) -> AuditReport:
    """Audits one configuration's claim on images of ``target``'s side with :data:`SIZED_AUDIT_MAX_TRIALS`.

    About 40 s at 64 x 64 on a shared 2-core CPU (most of it the scan of every pixel's pair);
    run it only where :func:`within_reach`.
    """
    return run_audit(name, dict(params), None, device=device, confidence=SIZED_AUDIT_CONFIDENCE,
                     image_size=audit_side(target), max_trials=SIZED_AUDIT_MAX_TRIALS)
